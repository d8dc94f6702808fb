#!/usr/bin/env python3
"""chat_to_speech.py - a chat model's reply spoken while it is written.

    python3 examples/python/chat_to_speech.py --chat-url http://127.0.0.1:8001/v1 \\
        --chat-model MODEL --prompt "Tell me about trains." --voice alloy -o reply.wav
    ... -o - | aplay -f S16_LE -r 24000 -c 1          # or play it as it comes (raw 16-bit)
    ... --interrupt-after 1.5                          # barge-in after 1.5 s of audio

The reply is streamed from any OpenAI-compatible chat endpoint (the `openai` package, stream=True)
and each text delta goes straight into cosyvoice-server's WebSocket (docs/websocket.md) while a
second thread takes the audio as the server makes it: speech starts after the first few words,
not after the whole reply. -o FILE.wav writes a WAV at the end; -o - writes the raw samples to
stdout as they arrive. Needs `openai` and `websockets`.

What was said: the server sends a `mark` event for every text piece (docs/websocket.md, "Marks:
what was said"): the sample of the utterance's audio before which the piece cannot be heard.
--interrupt-after SECONDS plays a caller who barges in: once that much audio has arrived the
example sends `cancel` (and stops reading the chat stream), and from the `cancelled` event's
sample count and the marks it prints the part of the reply the caller can have heard, as a voice
agent keeps in its conversation history instead of the whole reply (heard_text below). The
pieces from the first whose mark is at or after the last sample sent were certainly not heard;
the heard part is an upper bound (the marks are lower bounds of where speech starts: the last
heard piece's words may not all have been spoken).
"""
import argparse
import json
import sys
import threading
import time


def heard_text(pieces, marks, samples):
    """The part of the text pieces (the reply's pieces in the order sent) that a listener who got
    the first `samples` samples of the utterance's audio can have heard: the pieces whose mark
    sample is below `samples`, joined. marks: the utterance's `mark` events. Marks come in
    piece order and so do their samples, so this is a prefix of the reply."""
    text = "".join(pieces)
    end = 0
    for m in marks:
        if m["sample"] < samples:
            end = max(end, m["text_end"])    # characters (code points) of the joined pieces
    return text[:end]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chat-url", required=True, help="base URL of the chat API (…/v1)")
    ap.add_argument("--chat-model", required=True)
    ap.add_argument("--chat-key", default="unused", help="its API key, if it wants one")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--tts", default="ws://127.0.0.1:8000/v1/audio/speech/stream",
                    help="cosyvoice-server's WebSocket (default: %(default)s)")
    ap.add_argument("--voice", default="alloy")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--sample-rate", type=int, default=24000)
    ap.add_argument("-o", "--output", required=True,
                    help="FILE.wav, or - for raw samples on stdout")
    ap.add_argument("--interrupt-after", type=float, default=None, metavar="SECONDS",
                    help="barge in: cancel once this much audio has arrived and print the part "
                         "of the reply that was heard")
    a = ap.parse_args()
    import openai
    from websockets.sync.client import connect

    chat = openai.OpenAI(base_url=a.chat_url, api_key=a.chat_key)
    audio = bytearray()
    raw_out = sys.stdout.buffer if a.output == "-" else None
    result = {}
    marks = []
    t0 = time.monotonic()
    stop_after = (None if a.interrupt_after is None
                  else max(1, int(round(a.interrupt_after * a.sample_rate))))
    interrupted = threading.Event()
    send_lock = threading.Lock()   # a text piece is never sent after the cancel

    with connect(a.tts, max_size=None) as ws:
        session = {"type": "session", "voice": a.voice, "sample_rate": a.sample_rate}
        if a.seed is not None:
            session["seed"] = a.seed
        ws.send(json.dumps(session))

        def receive():
            """The audio as it comes, until the utterance's done (or an error)."""
            while True:
                m = ws.recv()
                if isinstance(m, bytes):
                    if "first" not in result:
                        result["first"] = time.monotonic() - t0
                    audio.extend(m)
                    if raw_out is not None:
                        raw_out.write(m)
                        raw_out.flush()
                    if (stop_after is not None and not interrupted.is_set()
                            and len(audio) // 2 >= stop_after):
                        with send_lock:   # the caller speaks: barge-in
                            ws.send(json.dumps({"type": "cancel"}))
                            interrupted.set()
                    continue
                ev = json.loads(m)
                if ev["type"] == "mark" and ev["utterance"] == 1:
                    marks.append(ev)
                if ev["type"] == "error" and "utterance" not in ev:
                    print(f"chat_to_speech: server: {ev['error']['message']}", file=sys.stderr)
                    result.setdefault("error", ev["error"]["message"])
                if ev.get("utterance") == 1 and ev["type"] in ("done", "cancelled", "error"):
                    result["end"] = ev
                    return

        reader = threading.Thread(target=receive, daemon=True)
        reader.start()
        reply = []
        try:
            stream = chat.chat.completions.create(
                model=a.chat_model, stream=True,
                messages=[{"role": "user", "content": a.prompt}])
            for part in stream:
                if not part.choices:
                    continue
                delta = part.choices[0].delta.content
                if delta:
                    with send_lock:
                        if interrupted.is_set():
                            break
                        reply.append(delta)
                        ws.send(json.dumps({"type": "text", "text": delta}))
            if interrupted.is_set():
                stream.close()   # the rest of the reply will not be spoken
            else:
                with send_lock:
                    if not interrupted.is_set():
                        ws.send(json.dumps({"type": "end"}))
        except BaseException:
            ws.send(json.dumps({"type": "cancel"}))   # stop speaking what will not be finished
            raise
        finally:
            reader.join()
    end = result.get("end", {})
    if end.get("type") != "done" and not (interrupted.is_set() and end.get("type") == "cancelled"):
        print(f"chat_to_speech: the speech did not finish: {end or result}", file=sys.stderr)
        return 1
    if raw_out is None:
        import numpy as np
        import cosyvoice
        pcm = np.frombuffer(bytes(audio), dtype="<i2").astype(np.float32) / 32767.0
        cosyvoice.write_wav(a.output, pcm, a.sample_rate)
    print(f"chat_to_speech: {''.join(reply)!r}\n  {end['seconds']:.2f} s of audio; first audio "
          f"{result.get('first', float('nan')):.3f} s after the request", file=sys.stderr)
    if end["type"] == "cancelled":
        # the server sent end["samples"] samples of the utterance (all of them arrived here:
        # `cancelled` follows its last audio); a player that stopped earlier passes its own count
        heard = heard_text(reply, marks, end["samples"])
        print(f"  interrupted after {end['samples']} samples; {end['marks']} of the "
              f"{end['pieces']} pieces got their mark; heard (at most):\n"
              f"heard: {json.dumps(heard)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
