// Keeps Gradio's stream of answers open while an event of the page still waits for its answer.
//
// Gradio 6's client (protocol sse_v3) reads every queued event's messages from one stream per page
// (GET <api>/queue/data?session_hash=...). The server ends that stream with a `close_stream` message as soon
// as an event completes and no other event of the session is pending; the client then marks the stream closed
// and opens a new one when it next joins an event. If the client joins an event while that `close_stream` is on
// its way (the server takes the join after it decided to close, the client reads the join's answer before the
// close), the client finds its stream still open and opens none, then reads the close: the new event's messages
// wait on the server with no stream to carry them, and its outputs never arrive (a page-load chain stalls).
//
// This wraps `window.fetch` (the client calls it for its joins and streams) and serves the client one stream
// that ends only when every event it joined has had its `process_completed`: a `close_stream` that arrives while
// a join is in flight or an event is unanswered is held back, and the stream goes on with a new request to the
// same address, which delivers the waiting messages. Loaded first in the page's <head>
// (inspector/ui/page_head.py), before Gradio's client makes its first request.
(() => {
  if (window.iiQueueStream) return;
  const fetch0 = window.fetch;
  const unanswered = new Set();  // event ids joined whose process_completed this page has not read yet
  const early = new Set();  // event ids whose process_completed came before their join's answer was read
  let joining = 0;  // joins sent and not answered yet
  // what it did, for tests: the joins it saw, the streams it went on with past a held-back close_stream
  const seen = window.iiQueueStream = { unanswered, joined: 0, reopened: 0 };

  const urlOf = (input) => String((input && input.url) || input);

  const join = (input, init) => {
    joining += 1;
    seen.joined += 1;
    const reply = fetch0(input, init);
    reply.then((response) => response.clone().json())
      .then((body) => {
        if (body && body.event_id && !early.delete(body.event_id)) unanswered.add(body.event_id);
      })
      .catch(() => {})  // a refused or failed join: no event to wait for
      .finally(() => { joining -= 1; });
    return reply;
  };

  // The messages of one stream's text, complete ones only: SSE messages end with a blank line.
  const messages = (text) => {
    const parts = text.split("\n\n");
    return { complete: parts.slice(0, -1), rest: parts[parts.length - 1] };
  };
  const parse = (message) => {
    const data = message.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5)).join("\n");
    try { return JSON.parse(data); } catch (e) { return null; }
  };

  const stream = (input, init) => {
    // a request to the stream's address (a Request is copied: each fetch takes its own)
    const again = () => fetch0(input instanceof Request ? new Request(input) : input, init);
    return again().then((first) => {
      if (!first.ok || !first.body) return first;
      const encoder = new TextEncoder();
      let reader = first.body.getReader();
      let decoder = new TextDecoder();
      let rest = "";
      const body = new ReadableStream({
        async pull(controller) {
          for (;;) {
            let value, done;
            try {
              ({ value, done } = await reader.read());
            } catch (error) {
              unanswered.clear();  // the stream broke: the client reports it to every waiting event
              throw error;
            }
            if (done) {
              controller.close();  // the server ended the stream without a close_stream: as the client would see it
              return;
            }
            const got = messages(rest + decoder.decode(value, { stream: true }));
            rest = got.rest;
            const out = [];
            for (const message of got.complete) {
              const msg = parse(message);
              if (msg && msg.msg === "process_completed" && msg.event_id && !unanswered.delete(msg.event_id)
                  && joining > 0) {
                early.add(msg.event_id);  // a quick event: answered before its join's answer was read here
              }
              if (msg && msg.msg === "close_stream" && (unanswered.size > 0 || joining > 0)) {
                // an event still waits: read on from a new stream of the same session instead of closing
                seen.reopened += 1;
                const next = await again();
                if (!next.ok || !next.body) {
                  out.push(message);  // no new stream: let the client see the close (it reports what it can)
                  continue;
                }
                reader.cancel().catch(() => {});
                reader = next.body.getReader();
                decoder = new TextDecoder();
                rest = "";
                break;  // the old stream's text after its close_stream, if any, is not the session's any more
              }
              out.push(message);
            }
            if (out.length) {
              controller.enqueue(encoder.encode(out.map((m) => m + "\n\n").join("")));
              return;
            }
          }
        },
        cancel(reason) {
          return reader.cancel(reason);
        },
      });
      return new Response(body, { status: first.status, statusText: first.statusText, headers: first.headers });
    });
  };

  window.fetch = function (input, init) {
    const url = urlOf(input);
    if (url.includes("/queue/join")) return join(input, init);
    const method = ((init && init.method) || (input instanceof Request ? input.method : "GET")).toUpperCase();
    if (url.includes("/queue/data") && method === "GET") return stream(input, init);
    return fetch0.apply(this, arguments);
  };
})();
