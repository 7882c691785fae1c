// Chunk-boundary-safe text helpers: a streaming UTF-8 decoder, a line buffer and an ANSI
// escape stripper. Chunks are not lines; each helper keeps what an incomplete chunk left over.

/** Decodes UTF-8 bytes that may split a code point between chunks. */
export class Utf8Decoder {
  readonly #decoder = new TextDecoder("utf-8");

  /** Decodes a chunk; an incomplete code point at its end waits for the next chunk. */
  decode(bytes: Uint8Array): string {
    return this.#decoder.decode(bytes, { stream: true });
  }

  /** Ends the input: an incomplete tail becomes U+FFFD. */
  flush(): string {
    return this.#decoder.decode();
  }
}

/** Splits chunks into lines ("\n", with a trailing "\r" removed); keeps the partial last line. */
export class LineBuffer {
  #pending = "";

  /** Adds a chunk and returns the lines it completed. */
  push(chunk: string): string[] {
    const text = this.#pending + chunk;
    const parts = text.split("\n");
    this.#pending = parts.pop() ?? "";
    return parts.map((line) => (line.endsWith("\r") ? line.slice(0, -1) : line));
  }

  /** The partial line not yet ended by "\n". */
  get pending(): string {
    return this.#pending;
  }

  /** Ends the input: returns the partial last line, if any. */
  flush(): string | undefined {
    const rest = this.#pending;
    this.#pending = "";
    return rest === "" ? undefined : rest;
  }
}

const ESC = "\u001b";
const BEL = "\u0007";
const CSI_C1 = "\u009b";
const OSC_C1 = "\u009d";

type AnsiState = "text" | "esc" | "escIntermediate" | "csi" | "string" | "stringEsc";

/**
 * Removes ANSI escape sequences (CSI, OSC, DCS/SOS/PM/APC strings, two- and three-character
 * escapes) from a stream of chunks; a sequence split between chunks is removed whole.
 */
export class AnsiStripper {
  #state: AnsiState = "text";

  push(chunk: string): string {
    let out = "";
    for (const ch of chunk) {
      const code = ch.codePointAt(0) ?? 0;
      switch (this.#state) {
        case "text":
          if (ch === ESC) this.#state = "esc";
          else if (ch === CSI_C1) this.#state = "csi";
          else if (ch === OSC_C1) this.#state = "string";
          else out += ch;
          break;
        case "esc":
          if (ch === "[") this.#state = "csi";
          else if (ch === "]" || ch === "P" || ch === "X" || ch === "^" || ch === "_") {
            this.#state = "string";
          } else if (code >= 0x20 && code <= 0x2f) this.#state = "escIntermediate";
          else this.#state = "text";
          break;
        case "escIntermediate":
          if (!(code >= 0x20 && code <= 0x2f)) this.#state = "text";
          break;
        case "csi":
          if (code >= 0x40 && code <= 0x7e) this.#state = "text";
          break;
        case "string":
          if (ch === BEL) this.#state = "text";
          else if (ch === ESC) this.#state = "stringEsc";
          break;
        case "stringEsc":
          this.#state = ch === "\\" ? "text" : "string";
          break;
      }
    }
    return out;
  }
}

/** Removes ANSI escape sequences from a complete string. */
export function stripAnsi(text: string): string {
  return new AnsiStripper().push(text);
}

export interface LinesOptions {
  /** Remove ANSI escape sequences (safely across chunk boundaries). Default false. */
  stripAnsi?: boolean;
}

/**
 * Adapts a per-line handler to a per-chunk callback:
 * `execStream(cmd, { onStdout: lines((line) => ...) })`. Call `.flush()` on the result after
 * the stream ended to receive a last line that had no "\n".
 */
export function lines(
  onLine: (line: string) => unknown,
  options: LinesOptions = {},
): ((chunk: string) => void) & { flush(): void } {
  const buffer = new LineBuffer();
  const stripper = options.stripAnsi ? new AnsiStripper() : undefined;
  const handler = (chunk: string): void => {
    const text = stripper ? stripper.push(chunk) : chunk;
    for (const line of buffer.push(text)) onLine(line);
  };
  return Object.assign(handler, {
    flush(): void {
      const rest = buffer.flush();
      if (rest !== undefined) onLine(rest);
    },
  });
}
