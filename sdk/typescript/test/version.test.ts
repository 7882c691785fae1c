// The SDK's VERSION is package.json's and the repository's VERSION.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { VERSION } from "sandstream";

// Compiled to test-dist/test/: the SDK is two levels up, the repository four.
const sdk = new URL("../../", import.meta.url);

test("VERSION is package.json's and the repository's", () => {
  const pkg = JSON.parse(readFileSync(new URL("package.json", sdk), "utf8")) as { version: string };
  const repo = readFileSync(new URL("../../VERSION", sdk), "utf8").trim();
  assert.equal(VERSION, pkg.version);
  assert.equal(VERSION, repo);
});
