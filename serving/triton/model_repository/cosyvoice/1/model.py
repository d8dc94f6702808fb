"""Triton Python backend (decoupled): CosyVoice3 speech through libcosyvoice.

Each model instance creates one engine (cosyvoice.Engine) on its device: instance_group
KIND_GPU gives one instance per GPU (model_instance_device_id), KIND_CPU an engine on the CPU.
execute() returns at once; every request gets a thread that submits it to the engine, pulls its
audio (cosy_request_read, without the GIL while waiting) and sends one response per chunk
(output "waveform", float32 [1, n]) and then the final flag. The engine batches all requests in
flight, so one instance serves many streams at once.

Inputs (config.pbtxt): target_text, and either voice (a saved voice name: VOICES_DIR/NAME.gguf)
or reference_wav (+ reference_wav_len, reference_text, reference_sample_rate) to clone a voice
from audio for this request (needs a model file with the front-end models); optional seed,
sample_rate, max_tokens, min_tokens. Outputs: waveform and sample_rate (its rate) in every
response. A request that fails gets an error response (with the library's status and message).

Limits, checked before any work: target_text at most max_text_chars (4096), reference_text at
most max_reference_text_chars (1000), voice at most 128 characters; no NUL in any of them;
reference_wav at most 30 s at 192 kHz. A request the client cancels is not started when it was
cancelled before its submission, and cancels its engine request within POLL_S after it.

Configuration: the parameters of config.pbtxt (model_path, voices_dir, max_active, max_queued,
gpu_memory_fraction); "$VAR" values are read from the environment. The cosyvoice package must be
importable by the Python backend's interpreter (pip install ./python) and find libcosyvoice
($COSYVOICE_LIB, pkg-config or the loader's path).
"""
import json
import os
import re
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

import cosyvoice

VOICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
POLL_S = 0.1   # how often a waiting reader checks whether its client cancelled
MAX_REFERENCE_S = 30      # the library's longest prompt recording (cosy_voice_from_audio)
MAX_REFERENCE_RATE = 192000


class ClientGone(Exception):
    """The client cancelled the request before it was submitted."""


def _param(cfg, key, default=""):
    v = cfg.get("parameters", {}).get(key, {}).get("string_value", default)
    v = os.path.expandvars(v)
    if "$" in v:
        raise pb_utils.TritonModelException(
            f"model parameter {key}={v!r}: the environment variable it names is not set")
    return v


def _scalar(request, name):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return None
    a = t.as_numpy().reshape(-1)
    if a.size != 1:
        raise ValueError(f"input {name} must hold one value; it has {a.size}")
    return a[0]


def _text(request, name, limit):
    """The string input name (None when absent): UTF-8, no NUL, at most limit characters."""
    v = _scalar(request, name)
    if v is None:
        return None
    if isinstance(v, bytes):
        if len(v) > 4 * limit:   # more bytes than limit characters can take: refuse unread
            raise ValueError(f"input {name} has {len(v)} bytes; the limit is {limit} characters")
        try:
            v = v.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"input {name} is not valid UTF-8: {e}") from None
    v = str(v)
    i = v.find("\0")
    if i >= 0:
        raise ValueError(f"input {name} contains a NUL character (U+0000) at position {i}; text "
                         "may not contain NUL")
    if len(v) > limit:
        raise ValueError(f"input {name} has {len(v)} characters; the limit is {limit}")
    return v


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(cfg):
            raise pb_utils.TritonModelException("the cosyvoice model must run decoupled "
                                                "(model_transaction_policy { decoupled: true })")
        model_path = _param(cfg, "model_path")
        self.voices_dir = _param(cfg, "voices_dir")
        self.max_text_chars = int(_param(cfg, "max_text_chars", "4096"))
        self.max_reference_text_chars = int(_param(cfg, "max_reference_text_chars", "1000"))
        device = -1
        if args.get("model_instance_kind") == "GPU":
            device = int(args["model_instance_device_id"])
        self.engine = cosyvoice.Engine(
            model_path, device=device, max_active=int(_param(cfg, "max_active", "0")),
            max_queued=int(_param(cfg, "max_queued", "0")),
            gpu_memory_fraction=float(_param(cfg, "gpu_memory_fraction", "0")))
        self.voices = {}   # name -> (mtime_ns, Voice)
        self.voices_lock = threading.Lock()
        self.threads = set()
        self.threads_lock = threading.Lock()
        self.closing = False
        self.logger = pb_utils.Logger
        self._start_metrics(args)
        self.logger.log_info(f"cosyvoice: {args['model_instance_name']}: engine on device "
                             f"{device} ({cosyvoice.version()[1]}), model {model_path}, voices "
                             f"{self.voices_dir}")

    # ---- metrics on Triton's endpoint (:8002/metrics) ----------------------------------------------
    def _start_metrics(self, args):
        """Engine gauges per instance (label instance), refreshed every 0.25 s by a thread."""
        G = pb_utils.MetricFamily.GAUGE
        fams = {
            "active": pb_utils.MetricFamily("cosyvoice_engine_active",
                                            "requests the engine decodes now", G),
            "queued": pb_utils.MetricFamily("cosyvoice_engine_queued",
                                            "requests waiting in the engine's queue", G),
            "requests_done": pb_utils.MetricFamily("cosyvoice_engine_requests_done",
                                                   "requests the engine finished since start", G),
            "audio_samples_out": pb_utils.MetricFamily("cosyvoice_engine_audio_samples",
                                                       "samples the engine made since start", G),
            "device_bytes_total": pb_utils.MetricFamily("cosyvoice_gpu_memory_bytes",
                                                        "device memory the engine holds", G),
        }
        labels = {"instance": args["model_instance_name"]}
        self.gauges = {k: f.Metric(labels=labels) for k, f in fams.items()}
        self.metric_families = fams
        self.stop_metrics = threading.Event()

        def loop():
            while not self.stop_metrics.is_set():
                try:
                    s = self.engine.stats()
                    for k, g in self.gauges.items():
                        g.set(float(getattr(s, k)))
                except Exception:
                    pass
                self.stop_metrics.wait(0.25)

        self.metrics_thread = threading.Thread(target=loop, daemon=True)
        self.metrics_thread.start()

    # ---- voices --------------------------------------------------------------------------------
    def _voice(self, name):
        if not VOICE_NAME.match(name):
            raise ValueError(f"invalid voice name {name!r}")
        path = os.path.join(self.voices_dir, name + ".gguf")
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            raise ValueError(f"voice {name!r} not found in the voices directory") from None
        with self.voices_lock:
            hit = self.voices.get(name)
            if hit and hit[0] == mtime:
                return hit[1], False
            v = self.engine.load_voice(path)
            if hit:
                hit[1].close()
            self.voices[name] = (mtime, v)
            return v, False

    def _request_voice(self, request):
        """(Voice, whether it belongs to this request only)."""
        wav = pb_utils.get_input_tensor_by_name(request, "reference_wav")
        name = _text(request, "voice", 128)
        if wav is not None:
            if name is not None:
                raise ValueError("give either voice or reference_wav, not both")
            pcm = wav.as_numpy().reshape(-1)
            most = MAX_REFERENCE_S * MAX_REFERENCE_RATE
            if pcm.size > most:
                raise ValueError(f"reference_wav has {pcm.size} samples; the limit is {most} "
                                 f"({MAX_REFERENCE_S} s at {MAX_REFERENCE_RATE} Hz)")
            n = _scalar(request, "reference_wav_len")
            if n is not None:
                if not 0 < int(n) <= pcm.size:
                    raise ValueError(f"reference_wav_len {int(n)} is outside 1..{pcm.size}")
                pcm = pcm[:int(n)]
            rate = _scalar(request, "reference_sample_rate")
            text = _text(request, "reference_text", self.max_reference_text_chars) or ""
            if request.is_cancelled():
                raise ClientGone()
            v = self.engine.voice_from_audio(pcm.astype(np.float32),
                                             16000 if rate is None else int(rate), text)
            return v, True
        if name is None:
            raise ValueError("give a voice (saved voice name) or reference_wav")
        return self._voice(name)

    # ---- requests ------------------------------------------------------------------------------
    def execute(self, requests):
        for request in requests:
            t = threading.Thread(target=self._serve, args=(request,), daemon=True)
            with self.threads_lock:
                self.threads.add(t)
            t.start()
        return None

    def _serve(self, request):
        sender = request.get_response_sender()
        r = None
        own_voice = None
        try:
            text = _text(request, "target_text", self.max_text_chars)
            if not text:
                raise ValueError("target_text is missing or empty")
            voice, own = self._request_voice(request)
            own_voice = voice if own else None
            kw = {}
            for name in ("seed", "sample_rate", "max_tokens", "min_tokens"):
                v = _scalar(request, name)
                if v is not None:
                    kw[name] = int(v)
            if request.is_cancelled() or self.closing:
                raise ClientGone()
            r = self.engine.submit(voice, text, **kw)
            rate = np.array([[r.sample_rate]], dtype=np.int32)
            while True:
                if request.is_cancelled() or self.closing:
                    r.cancel()
                try:
                    chunk = r.read(timeout=POLL_S)
                except cosyvoice.Timeout:
                    continue
                if chunk.size == 0:
                    break
                out = [pb_utils.Tensor("waveform", chunk.reshape(1, -1)),
                       pb_utils.Tensor("sample_rate", rate)]
                sender.send(pb_utils.InferenceResponse(output_tensors=out))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as e:   # every failure goes back to the client, then the stream ends
            if isinstance(e, (cosyvoice.Cancelled, ClientGone)):
                msg = "cancelled"
            elif isinstance(e, cosyvoice.CosyError):
                msg = f"{cosyvoice.status_str(e.status)} ({e.status}): {e.message}"
            else:
                msg = str(e)
            try:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(msg)),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except Exception as e2:   # the client may be gone
                self.logger.log_warn(f"cosyvoice: could not send the error ({msg}): {e2}")
        finally:
            if r is not None:
                r.close()
            if own_voice is not None:
                own_voice.close()
            with self.threads_lock:
                self.threads.discard(threading.current_thread())

    def finalize(self):
        self.closing = True
        t0 = time.monotonic()
        while True:
            with self.threads_lock:
                alive = [t for t in self.threads if t.is_alive()]
            if not alive or time.monotonic() - t0 > 30:
                break
            time.sleep(0.05)
        self.stop_metrics.set()
        self.metrics_thread.join()
        with self.voices_lock:
            for _, v in self.voices.values():
                v.close()
            self.voices.clear()
        self.engine.close()
