// The resumable message streams under exec, process logs and code runs: the first connection
// (retried while nothing was sent), resumption after a cut, the process id picked from `start`,
// and the conversion to an SSE byte stream for callers that want bytes.

import type { Client, StreamOpener } from "./client.js";
import type { ExitInfo } from "./models.js";
import type { Wire } from "./scope.js";
import { encodeSSE, type SseMessage } from "./sse.js";

export function parseData(message: SseMessage): Wire {
  try {
    const value: unknown = JSON.parse(message.data);
    return value !== null && typeof value === "object" ? (value as Wire) : {};
  } catch {
    return {};
  }
}

export function exitFromCloudflare(data: Wire): ExitInfo {
  return {
    exitCode: typeof data["exitCode"] === "number" ? data["exitCode"] : Number.NaN,
    signal: typeof data["signal"] === "string" ? data["signal"] : null,
    reason: data["reason"] as ExitInfo["reason"],
    durationMs: typeof data["durationMs"] === "number" ? data["durationMs"] : 0,
  };
}

/** Turns a resumable message iterator into an SSE byte stream; `map` may drop or rewrite. */
export function toByteStream(
  messages: AsyncGenerator<SseMessage>,
  stop: AbortController,
  map: (message: SseMessage) => SseMessage | undefined = (m) => m,
): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          let step: IteratorResult<SseMessage>;
          try {
            step = await messages.next();
          } catch (error) {
            controller.error(error);
            return;
          }
          if (step.done === true) {
            controller.close();
            return;
          }
          const out = map(step.value);
          if (out !== undefined) {
            controller.enqueue(encodeSSE(out));
            return;
          }
        }
      },
      async cancel(reason) {
        stop.abort(reason);
        await messages.return(undefined).catch(() => undefined);
      },
    },
    { highWaterMark: 0 },
  );
}

/** What a stream learned so far that a caller may need: the id from its `start` event. */
export interface StreamState {
  processId: string | undefined;
}

/** Opens the first connection (retrying transport failures), then resumes as needed. */
export async function resume(
  client: Client,
  opener: StreamOpener,
  signal: AbortSignal | undefined,
  state: StreamState,
  lastEventId?: string,
): Promise<AsyncGenerator<SseMessage>> {
  const firstSignal = signal ?? new AbortController().signal;
  const first = await client.retrying(signal, () => opener(lastEventId, firstSignal));
  let used = false;
  const resumingOpener: StreamOpener = (lastEventId, attemptSignal) => {
    if (!used) {
      used = true;
      return Promise.resolve(first);
    }
    return opener(lastEventId, attemptSignal);
  };
  const messages = client.resumable(resumingOpener, signal, () => state, lastEventId);
  const tracked = async function* (): AsyncGenerator<SseMessage> {
    for await (const message of messages) {
      if (message.event === "start" && state.processId === undefined) {
        const id = parseData(message)["processId"];
        if (typeof id === "string") state.processId = id;
      }
      yield message;
    }
  };
  return tracked();
}
