// The SDK's version, the repository's VERSION and package.json's (scripts/set-version writes
// all three; scripts/check-version compares them).

export const VERSION = "0.1.0";
