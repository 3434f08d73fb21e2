"""A fake LLM upstream: OpenAI, Anthropic, Gemini, Ollama and Bedrock streaming endpoints, with
faults.

``create_app()`` returns the ASGI app; ``python -m unbroken.mock --host 127.0.0.1 --port 8100``
runs it under uvicorn. The mock writes every provider's wire bytes itself (it never uses this
library's parsers), deterministically: the same request and scenario give the same bytes.

Endpoints
---------
- ``POST /v1/chat/completions`` (openai-chat), ``POST /v1/responses`` (openai-responses) and
  ``POST /v1/messages`` (anthropic) stream when the body says ``"stream": true``;
- ``GET /v1/responses/{id}`` (background responses only; ``?stream=true&starting_after=N``);
- ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` (gemini; without ``alt=sse`` the
  chunks come as one JSON array) and ``POST /v1beta/models/{model}:generateContent`` (whole body);
  the same under ``/v1/models/`` (the default of google-genai);
- ``POST /api/chat`` and ``POST /api/generate`` (ollama, NDJSON) stream unless the body says
  ``"stream": false``;
- ``POST /model/{model}/converse-stream`` (bedrock-converse, AWS event stream) and
  ``POST /model/{model}/converse`` (whole body); ``POST /model/{model}/invoke-with-response-stream``
  (bedrock-invoke: Claude's events in ``chunk`` messages) and ``POST /model/{model}/invoke``
  (Anthropic's whole message); requests are not checked for a signature;
- ``GET /_mock/requests`` -> ``{"generations": {path: n}, "resumes": {path: n}}`` (a path with
  no count is absent); ``POST /_mock/reset`` clears counts, status-fault attempts and stored
  background responses.

Scenario: header ``Unbroken-Mock: key=value; key=value`` or query ``?mock=key=value;...``
(keys in ``scenario.py``). Text: ``reply_text(seed, tokens)``, streamed as the ``tokens`` deltas
of ``reply_deltas(seed, tokens)``, one delta per text frame; every delta has a multi-byte character.
Usage numbers: 12 prompt tokens, ``tokens`` output tokens. Tool call (``finish=tool_calls``):
``get_weather`` with arguments ``{"city": "東京 🌧", "unit": "celsius"}`` in two argument deltas.

Frames
------
A *frame* is one SSE event, one NDJSON line or one event-stream message. Frames are numbered
1, 2, 3 ... over the whole body; keep-alives sent for ``pings=1`` are not frames and are not
numbered. T = ``tokens``. Text frames are the only frames that surely contain a multi-byte
character.

openai-chat (``data:`` only, LF)::

    1            role chunk  delta {"role": "assistant", "content": "", "refusal": null}
    2 .. T+1     content chunks, delta {"content": <delta i>}
    tool_calls:  T+2 tool call start (id, name, arguments ""), T+3 and T+4 argument deltas
    next         finish chunk: delta {}, finish_reason stop|length|content_filter|tool_calls
    next         usage chunk (choices []), only with stream_options.include_usage
    last         data: [DONE]
    finish=error: the finish chunk is {"error": {... "code": "server_error"}} and the body ends
    there (no usage, no [DONE]). Totals: T+3 (+1 usage) (+3 tool_calls); error T+2 (+3).

openai-responses (``event:`` + ``data:``, LF; sequence_number = frame number - 1)::

    1 response.created  2 response.in_progress  3 response.output_item.added
    4 response.content_part.added   5 .. T+4 response.output_text.delta (delta i)
    T+5 response.output_text.done   T+6 response.content_part.done
    T+7 response.output_item.done
    tool_calls: T+8 output_item.added (function_call), T+9 and T+10
                function_call_arguments.delta, T+11 ...arguments.done, T+12 output_item.done
    last: response.completed (stop, tool_calls) | response.incomplete (length:
          max_output_tokens, content_filter: content_filter) | response.failed (error)
    Totals: T+8, tool_calls T+13.

anthropic (``event:`` + ``data:``, LF)::

    1 message_start  2 content_block_start (text)  3 ping
    4 .. T+3 content_block_delta (text_delta i)    T+4 content_block_stop
    tool_calls: T+5 content_block_start (tool_use), T+6 and T+7 input_json_delta,
                T+8 content_block_stop
    next message_delta (stop_reason end_turn|max_tokens|refusal|tool_use)   last message_stop
    finish=error: message_delta and message_stop are replaced by one ``error`` event
    (overloaded_error). Totals: T+6 (+4 tool_calls); error T+5 (+4).

gemini (``data:`` only, CRLF line ends)::

    1 .. T   one candidate chunk per delta (usageMetadata on each, cumulative)
    T+1      final chunk: finishReason STOP|MAX_TOKENS|SAFETY|MALFORMED_FUNCTION_CALL (error);
             parts [{"text": ""}], or [functionCall] for tool_calls, no content for SAFETY and
             MALFORMED_FUNCTION_CALL. Total T+1.
    partial_args=1 with tool_calls (Vertex's streamFunctionCallArguments): T+1 names the call
             (willContinue), T+2 .. T+6 one partialArgs piece each ($.city in two pieces and an
             empty one, $.unit and an empty one), T+7 the final chunk with functionCall {}.

ollama (NDJSON, Go-style JSON: ``<``, ``>``, ``&`` escaped as ``\\u003c`` ...)::

    1 .. T   {"message": {"role": "assistant", "content": <delta i>}, "done": false}
    tool_calls: T+1 {"message": {"content": "", "tool_calls": [...]}, "done": false}
    last     {"done": true, "done_reason": "stop"|"length", ...counts}; finish=error:
             {"error": "..."} instead. content_filter is a 400. Total T+1 (+1 tool_calls).
    /api/generate: the same lines with the text in "response" instead of "message"
    ({"response": <delta i>, "done": false}; last {"response": "", "done": true,
    "done_reason": ..., "context": [1, 2, 3], ...counts}); tool_calls is a 400 too.

bedrock-converse (event-stream messages; JSON payloads padded with a ``p`` member)::

    1 messageStart  2 .. T+1 contentBlockDelta (text, block 0)  T+2 contentBlockStop
    tool_calls: T+3 contentBlockStart (toolUse id, name, block 1), T+4 and T+5 toolUse input
                deltas, T+6 contentBlockStop
    next messageStop (stopReason end_turn|max_tokens|content_filtered|tool_use)
    last metadata (usage, metrics). finish=error: messageStop and metadata are replaced by one
    ``modelStreamErrorException`` exception message. Totals: T+4 (+4 tool_calls); error T+3 (+4).

bedrock-invoke (``chunk`` messages, ``{"bytes": <base64 of the event's JSON>, "p": ...}``): the
anthropic layout without its ping, the last event (message_stop) carrying
``amazon-bedrock-invocationMetrics`` (inputTokenCount, outputTokenCount, latencies); finish=error:
message_delta and message_stop are replaced by one ``modelStreamErrorException`` exception
message. Totals: T+5 (+4 tool_calls); error T+4 (+4).

Faults
------
Data faults count frames of the layout above and are part of the body (a resume replays them):
``error_at=N`` replaces frame N with the provider's error (chat ``{"error": ...}`` chunk,
Responses ``error`` event with sequence_number N-1, Anthropic ``error`` overloaded_error,
Gemini ``{"error": {"code": 500, ...}}``, Ollama ``{"error": "..."}``, Bedrock a
``modelStreamErrorException``) and ends the body there;
``malformed_json_at=N`` drops the last byte of frame N's payload (its closing brace);
``invalid_utf8_at=N`` replaces the first multi-byte character of frame N's payload with the byte
0xFF (a frame without one gets 0xFF before its payload's last byte); ``duplicate=N``
(openai-responses only) inserts an exact copy of frame N right after it, so later frames move
one place on the wire. Connection faults count frames on the wire (after ``duplicate``):
``drop_after=N`` writes N frames, then closes the connection without the terminating chunk
(``drop_after=0``: headers only); with ``drop_mid=1`` frame N+1 is also written up to and
including the first byte of its first multi-byte character (a frame without one is cut in its
middle; a text frame always has one). ``stall_after=N`` pauses ``stall_s`` seconds (default 60)
after frame N (0: before the first frame); with ``pings=1`` it sends a keep-alive every
``ping_ms`` (default 100) meanwhile, ceil(stall_ms / ping_ms) - 1 of them. A client that hangs
up during a stall ends the handler at once. ``pings=1`` also sends a keep-alive before every
frame but the first of a connection (SSE comment ``: keep-alive``; Anthropic ``event: ping``;
nothing for Ollama).
``delay_ms=M`` pauses before every frame but the first. ``split_utf8=1`` writes each frame in
several writes (separate HTTP chunks), cut inside each of its multi-byte characters (at varying
byte positions), or in its middle if it has none, with a 1 ms pause between writes.
``partial_args=1`` (Gemini only, with ``finish=tool_calls``) streams the tool call's arguments
as Vertex AI's ``partialArgs`` pieces (see the gemini layout above).
``sse_ids=1`` puts ``id: <frame number>`` first in every frame; a POST of the same request with
``Last-Event-ID: n`` then streams frames n+1 ... and counts as a resume. ``background: true``
(Responses) stores the frames; ``GET /v1/responses/{id}?stream=true&starting_after=N`` streams
the frames whose sequence_number > N, counted as a resume of ``/v1/responses``. Resumes are
never dropped or stalled. ``status=429|500|503``: requests with this scenario string on this path
get that status in the provider's error format, with ``Retry-After`` and ``retry-after-ms``
from ``retry_after=S`` (a 429 always has them, 1 s by default); the first ``status_times`` of
them, or all without it. Ids (chatcmpl-, msg_, resp_ ...) derive from the path, the request body,
``seed``, ``tokens`` and ``finish``, so a faulty and a clean stream of one request differ only
where the faults are; a background response gets a fresh id each time.
``stream: false`` answers the whole body; only status faults apply to it. A bad scenario, a
finish the provider cannot express, a fault past the last frame: 400 naming the key.
"""

from .app import SCENARIO_HEADER, create_app
from .reply import reply_deltas, reply_text
from .server import serve

__all__ = ["SCENARIO_HEADER", "create_app", "reply_deltas", "reply_text", "serve"]
