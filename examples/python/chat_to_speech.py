#!/usr/bin/env python3
"""chat_to_speech.py - a chat model's reply spoken while it is written.

    python3 examples/python/chat_to_speech.py --chat-url http://127.0.0.1:8001/v1 \\
        --chat-model MODEL --prompt "Tell me about trains." --voice alloy -o reply.wav
    ... -o - | aplay -f S16_LE -r 24000 -c 1          # or play it as it comes (raw 16-bit)

The reply is streamed from any OpenAI-compatible chat endpoint (the `openai` package, stream=True)
and each text delta goes straight into cosyvoice-server's WebSocket (docs/websocket.md) while a
second thread takes the audio as the server makes it: speech starts after the first few words,
not after the whole reply. -o FILE.wav writes a WAV at the end; -o - writes the raw samples to
stdout as they arrive. Needs `openai` and `websockets`.
"""
import argparse
import json
import sys
import threading
import time


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
    a = ap.parse_args()
    import openai
    from websockets.sync.client import connect

    chat = openai.OpenAI(base_url=a.chat_url, api_key=a.chat_key)
    audio = bytearray()
    raw_out = sys.stdout.buffer if a.output == "-" else None
    result = {}
    t0 = time.monotonic()

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
                    continue
                ev = json.loads(m)
                if ev["type"] == "error" and "utterance" not in ev:
                    print(f"chat_to_speech: server: {ev['error']['message']}", file=sys.stderr)
                    result.setdefault("error", ev["error"]["message"])
                if ev["type"] in ("done", "cancelled") or (ev["type"] == "error"
                                                           and "utterance" in ev):
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
                    reply.append(delta)
                    ws.send(json.dumps({"type": "text", "text": delta}))
            ws.send(json.dumps({"type": "end"}))
        except BaseException:
            ws.send(json.dumps({"type": "cancel"}))   # stop speaking what will not be finished
            raise
        finally:
            reader.join()
    end = result.get("end", {})
    if end.get("type") != "done":
        print(f"chat_to_speech: the speech did not finish: {end or result}", file=sys.stderr)
        return 1
    if raw_out is None:
        import numpy as np
        import cosyvoice
        pcm = np.frombuffer(bytes(audio), dtype="<i2").astype(np.float32) / 32767.0
        cosyvoice.write_wav(a.output, pcm, a.sample_rate)
    print(f"chat_to_speech: {''.join(reply)!r}\n  {end['seconds']:.2f} s of audio; first audio "
          f"{result.get('first', float('nan')):.3f} s after the request", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
