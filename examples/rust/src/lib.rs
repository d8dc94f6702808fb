//! Safe bindings to libcosyvoice (Fun-CosyVoice3 text to speech in C), std only.
//!
//! ```no_run
//! use cosyvoice::{Engine, Params};
//! let eng = Engine::new("model.gguf")?;
//! let voice = eng.load_voice("voice.gguf")?;
//! // or clone one from a recording: let (pcm, rate) = cosyvoice::read_wav("prompt.wav")?;
//! //                                 let voice = eng.voice_from_audio(&pcm, rate, "What it says.")?;
//! let p = Params { seed: 42, ..Params::default() };
//! let pcm: Vec<f32> = eng.synthesize(&voice, "Hello.", &p)?;          // blocking
//! for chunk in eng.stream(&voice, "Hello again.", &p)? {              // pull streaming
//!     let chunk: Vec<f32> = chunk?;
//! }
//! let (mut req, mut sink) = eng.stream_text(&voice, &p)?;            // text streamed in
//! sink.push("Hello, ")?; sink.push("world.")?; sink.end()?;           // (any one thread)
//! let pcm: Vec<f32> = (&mut req).map(|c| c.unwrap()).flatten().collect();
//! let marks: Vec<cosyvoice::TextMark> = req.text_marks()?;            // where each sentence starts
//! # Ok::<(), cosyvoice::Error>(())
//! ```
//!
//! Ownership follows the C API and is enforced by the types: `Engine`, `Voice` and `Request`
//! free their handle in `Drop`; a `Voice<'e>` borrows its `Engine`, so it cannot outlive it (the
//! C API wants voices released before their engine). A `Request` owns its handle alone (the
//! library keeps its voice alive) and may be moved to another thread; `Request::canceller`
//! gives a `Canceller` that any thread may use while another one reads.
//!
//! Every failure is an [`Error`] with the `cosy_status` code and `cosy_last_error()` (read on
//! the calling thread right after the call: Rust threads are OS threads).
#![allow(non_camel_case_types)]
// `x % 80 != 0` reads as the C API; is_multiple_of needs Rust 1.87
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// A RIFF/WAVE file of 16-bit PCM or 32-bit float samples (plain or WAVE_FORMAT_EXTENSIBLE) as
/// mono samples in [-1, 1] (channels mixed by their mean) and its sample rate; other encodings
/// are an `std::io::Error` naming them.
pub fn read_wav(path: impl AsRef<Path>) -> std::io::Result<(Vec<f32>, i32)> {
    use std::io::{Error as IoError, ErrorKind};
    let bad = |m: String| IoError::new(ErrorKind::InvalidData, format!("{}: {}", path.as_ref().display(), m));
    let b = std::fs::read(path.as_ref())?;
    if b.len() < 12 || &b[0..4] != b"RIFF" || &b[8..12] != b"WAVE" {
        return Err(bad("not a RIFF/WAVE file".into()));
    }
    let u16_at = |p: &[u8], i: usize| u16::from_le_bytes([p[i], p[i + 1]]);
    let u32_at = |p: &[u8], i: usize| u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
    let (mut fmt, mut data) = (None, None);
    let mut off = 12;
    while off + 8 <= b.len() {
        let size = (u32_at(&b, off + 4) as usize).min(b.len() - off - 8); // truncated last chunk
        let body = &b[off + 8..off + 8 + size];
        match &b[off..off + 4] {
            b"fmt " if size >= 16 => {
                let mut tag = u16_at(body, 0);
                if tag == 0xFFFE && size >= 26 {
                    tag = u16_at(body, 24); // extensible: the sub-format's tag
                }
                fmt = Some((tag, u16_at(body, 2) as usize, u32_at(body, 4) as i32, u16_at(body, 14)));
            }
            b"data" => data = Some(body),
            _ => {}
        }
        off += 8 + size + (size & 1);
    }
    let ((tag, ch, rate, bits), data) = match (fmt, data) {
        (Some(f), Some(d)) if f.1 > 0 => (f, d),
        _ => return Err(bad("no fmt or data chunk".into())),
    };
    let width = match (tag, bits) {
        (1, 16) => 2,
        (3, 32) => 4,
        _ => return Err(bad(format!("format {} with {}-bit samples (this reader takes 16-bit PCM \
                                     or 32-bit float)", tag, bits))),
    };
    let out = data
        .chunks_exact(width * ch)
        .map(|frame| {
            let sum: f64 = frame
                .chunks_exact(width)
                .map(|s| if width == 2 { u16_at(s, 0) as i16 as f64 / 32768.0 } else { f32::from_bits(u32_at(s, 0)) as f64 })
                .sum();
            (sum / ch as f64) as f32
        })
        .collect();
    Ok((out, rate))
}

/// Raw declarations mirroring `cosyvoice.h` (checked against the C compiler by the tests).
pub mod sys {
    use std::os::raw::{c_char, c_void};

    pub type cosy_status = i32;
    #[repr(C)]
    pub struct cosy_engine {
        _p: [u8; 0],
    }
    #[repr(C)]
    pub struct cosy_voice {
        _p: [u8; 0],
    }
    #[repr(C)]
    pub struct cosy_request {
        _p: [u8; 0],
    }
    pub type cosy_log_fn = Option<unsafe extern "C" fn(*mut c_void, i32, *const c_char)>;
    pub type cosy_chunk_fn = Option<unsafe extern "C" fn(*mut c_void, *const cosy_chunk) -> i32>;

    #[repr(C)]
    pub struct cosy_engine_config {
        pub struct_size: u32,
        pub flags: u32,
        pub model_path: *const c_char,
        pub device: i32,
        pub gpu_memory_fraction: f32,
        pub max_active: i32,
        pub max_queued: i32,
        pub cpu_threads: i32,
        pub log_level: i32,
        pub log_fn: cosy_log_fn,
        pub log_user: *mut c_void,
        pub first_chunk_wait_max: i32,
        pub vocoder_precision: i32,
    }
    #[repr(C)]
    pub struct cosy_engine_stats {
        pub struct_size: u32,
        pub reserved: u32,
        pub weights_bytes: i64,
        pub kv_bytes: i64,
        pub workspace_bytes: i64,
        pub device_bytes_total: i64,
        pub kv_pages_total: i32,
        pub kv_pages_used: i32,
        pub active: i32,
        pub queued: i32,
        pub requests_done: i64,
        pub audio_samples_out: i64,
        pub llm_steps: i64,
        pub llm_step_rows: i64,
        pub flow_calls: i64,
        pub flow_jobs: i64,
        pub vocoder_calls: i64,
        pub vocoder_jobs: i64,
        pub flow_pages_total: i32,
        pub flow_pages_used: i32,
    }
    #[repr(C)]
    pub struct cosy_voice_features {
        pub struct_size: u32,
        pub reserved: u32,
        pub prompt_text: *const c_char,
        pub speech_tokens: *const i32,
        pub n_speech_tokens: i32,
        pub n_mel_frames: i32,
        pub mel: *const f32,
        pub speaker_embedding: *const f32,
        pub speaker_dim: i32,
        pub reserved2: i32,
    }
    #[repr(C)]
    pub struct cosy_synth_params {
        pub struct_size: u32,
        pub flags: u32,
        pub mode: i32,
        pub sample_rate: i32,
        pub instruct_text: *const c_char,
        pub speed: f32,
        pub temperature: f32,
        pub top_p: f32,
        pub top_k: i32,
        pub seed: u64,
        pub first_chunk_tokens: i32,
        pub max_tokens: i32,
        pub min_tokens: i32,
        pub reserved: i32,
    }
    #[repr(C)]
    pub struct cosy_chunk {
        pub struct_size: u32,
        pub flags: u32,
        pub pcm: *const f32,
        pub n_samples: i64,
        pub offset: i64,
        pub sample_rate: i32,
        pub reserved: i32,
    }
    #[repr(C)]
    pub struct cosy_request_stats {
        pub struct_size: u32,
        pub reserved: u32,
        pub ttfb_s: f64,
        pub total_s: f64,
        pub llm_s: f64,
        pub flow_s: f64,
        pub vocoder_s: f64,
        pub n_samples: i64,
        pub n_text_tokens: i32,
        pub n_speech_tokens: i32,
        pub n_chunks: i32,
        pub done: i32,
    }
    #[repr(C)]
    pub struct cosy_text_mark {
        pub struct_size: u32,
        pub reserved: u32,
        pub text_begin: i64,
        pub text_end: i64,
        pub sample: i64,
        pub text_token: i32,
        pub speech_token: i32,
    }

    pub const COSY_DEVICE_CPU: i32 = -1;
    pub const COSY_SYNTH_NO_TEXT_NORMALIZATION: u32 = 0x1;
    pub const COSY_SYNTH_TEXT_STREAM: u32 = 0x8;
    pub const COSY_CHUNK_LAST: u32 = 0x1;

    extern "C" {
        pub fn cosy_version_number() -> u32;
        pub fn cosy_version_string() -> *const c_char;
        pub fn cosy_status_str(s: cosy_status) -> *const c_char;
        pub fn cosy_last_error() -> *const c_char;
        pub fn cosy_engine_config_init(c: *mut cosy_engine_config, struct_size: u32);
        pub fn cosy_engine_create(c: *const cosy_engine_config, out: *mut *mut cosy_engine)
            -> cosy_status;
        pub fn cosy_engine_destroy(e: *mut cosy_engine);
        pub fn cosy_engine_sample_rate(e: *const cosy_engine) -> i32;
        pub fn cosy_engine_stats_init(s: *mut cosy_engine_stats, struct_size: u32);
        pub fn cosy_engine_get_stats(e: *const cosy_engine, out: *mut cosy_engine_stats)
            -> cosy_status;
        pub fn cosy_voice_load(e: *mut cosy_engine, path: *const c_char, out: *mut *mut cosy_voice)
            -> cosy_status;
        pub fn cosy_voice_save(v: *const cosy_voice, path: *const c_char) -> cosy_status;
        pub fn cosy_voice_features_init(f: *mut cosy_voice_features, struct_size: u32);
        pub fn cosy_voice_from_features(e: *mut cosy_engine, f: *const cosy_voice_features,
                                        out: *mut *mut cosy_voice) -> cosy_status;
        pub fn cosy_voice_from_audio(e: *mut cosy_engine, pcm: *const f32, n_samples: i64,
                                     sample_rate: i32, transcript: *const c_char,
                                     out: *mut *mut cosy_voice) -> cosy_status;
        pub fn cosy_audio_to_mel(pcm: *const f32, n_samples: i64, sample_rate: i32,
                                 mel: *mut *mut f32, n_frames: *mut i32) -> cosy_status;
        pub fn cosy_voice_release(v: *mut cosy_voice);
        pub fn cosy_synth_params_init(p: *mut cosy_synth_params, struct_size: u32);
        pub fn cosy_synthesize(e: *mut cosy_engine, v: *const cosy_voice, text: *const c_char,
                               p: *const cosy_synth_params, pcm: *mut *mut f32,
                               n_samples: *mut i64) -> cosy_status;
        pub fn cosy_request_submit(e: *mut cosy_engine, v: *const cosy_voice, text: *const c_char,
                                   p: *const cosy_synth_params, f: cosy_chunk_fn,
                                   user: *mut c_void, out: *mut *mut cosy_request) -> cosy_status;
        pub fn cosy_request_push_text(r: *mut cosy_request, utf8: *const c_char) -> cosy_status;
        pub fn cosy_request_end_text(r: *mut cosy_request) -> cosy_status;
        pub fn cosy_request_read(r: *mut cosy_request, buf: *mut f32, cap: i64, n_read: *mut i64,
                                 timeout_ms: i32) -> cosy_status;
        pub fn cosy_request_stats_init(s: *mut cosy_request_stats, struct_size: u32);
        pub fn cosy_request_get_stats(r: *const cosy_request, out: *mut cosy_request_stats)
            -> cosy_status;
        pub fn cosy_text_mark_init(m: *mut cosy_text_mark, struct_size: u32);
        pub fn cosy_request_text_marks(r: *const cosy_request, first: i32, out: *mut cosy_text_mark,
                                       cap: i32, n_marks: *mut i32) -> cosy_status;
        pub fn cosy_request_cancel(r: *mut cosy_request);
        pub fn cosy_request_wait(r: *mut cosy_request, timeout_ms: i32) -> cosy_status;
        pub fn cosy_request_release(r: *mut cosy_request);
        pub fn cosy_free(p: *mut c_void);
    }
}

/// A `cosy_status` code (values pinned by the C header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(pub i32);

impl Status {
    pub const OK: Status = Status(0);
    pub const INVALID_ARG: Status = Status(1);
    pub const STRUCT_SIZE: Status = Status(2);
    pub const NO_MEMORY: Status = Status(3);
    pub const GPU_NO_MEMORY: Status = Status(4);
    pub const CUDA: Status = Status(5);
    pub const DEVICE_LOST: Status = Status(6);
    pub const IO: Status = Status(7);
    pub const MODEL_FORMAT: Status = Status(8);
    pub const MODEL_VERSION: Status = Status(9);
    pub const UNSUPPORTED: Status = Status(10);
    pub const CANCELLED: Status = Status(11);
    pub const TIMEOUT: Status = Status(12);
    pub const QUEUE_FULL: Status = Status(13);
    pub const TEXT: Status = Status(14);
    pub const INTERNAL: Status = Status(99);

    /// The library's text for this status.
    pub fn text(self) -> &'static str {
        // SAFETY: cosy_status_str returns a static NUL-terminated string, never NULL.
        unsafe { CStr::from_ptr(sys::cosy_status_str(self.0)) }.to_str().unwrap_or("?")
    }
}

/// A failed library call.
#[derive(Clone, Debug)]
pub struct Error {
    pub status: Status,
    /// The C function (or "cosyvoice" for argument errors found on the Rust side).
    pub op: &'static str,
    /// `cosy_last_error()` right after the call.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({}): {}", self.op, self.status.text(), self.status.0, self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn check(st: sys::cosy_status, op: &'static str) -> Result<()> {
    if st == 0 {
        return Ok(());
    }
    // SAFETY: never NULL; thread-local, valid until this thread's next failing call.
    let msg = unsafe { CStr::from_ptr(sys::cosy_last_error()) }.to_string_lossy().into_owned();
    Err(Error { status: Status(st), op, message: msg })
}

fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error {
        status: Status::INVALID_ARG,
        op: "cosyvoice",
        message: format!("{} contains a NUL byte", what),
    })
}

fn cpath(p: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Error {
        status: Status::INVALID_ARG,
        op: "cosyvoice",
        message: "path contains a NUL byte".into(),
    })
}

/// The loaded library's version string, e.g. "0.1.0 (cpu only)".
pub fn version() -> String {
    // SAFETY: static string, never NULL.
    unsafe { CStr::from_ptr(sys::cosy_version_string()) }.to_string_lossy().into_owned()
}

/// Engine options; 0 means the library's default. `device` defaults to the CPU here.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub device: i32,
    pub cpu_threads: i32,
    pub max_active: i32,
    pub max_queued: i32,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { device: sys::COSY_DEVICE_CPU, cpu_threads: 0, max_active: 0, max_queued: 0 }
    }
}

/// Weights, threads and scheduler. Thread-safe: share it (`&Engine`, `Arc<Engine>`).
pub struct Engine {
    ptr: NonNull<sys::cosy_engine>,
}

// SAFETY: the C engine is documented thread-safe.
unsafe impl Send for Engine {}
unsafe impl Sync for Engine {}

impl Engine {
    /// Load a model on the CPU with default options.
    pub fn new(model: impl AsRef<Path>) -> Result<Engine> {
        Engine::with_options(model, &EngineOptions::default())
    }

    pub fn with_options(model: impl AsRef<Path>, o: &EngineOptions) -> Result<Engine> {
        let path = cpath(model.as_ref())?;
        // SAFETY: the struct is plain data, initialised by the library before use.
        let mut c: sys::cosy_engine_config = unsafe { std::mem::zeroed() };
        unsafe { sys::cosy_engine_config_init(&mut c, std::mem::size_of_val(&c) as u32) };
        c.model_path = path.as_ptr();
        c.device = o.device;
        c.cpu_threads = o.cpu_threads;
        c.max_active = o.max_active;
        c.max_queued = o.max_queued;
        let mut e = ptr::null_mut();
        check(unsafe { sys::cosy_engine_create(&c, &mut e) }, "cosy_engine_create")?;
        Ok(Engine { ptr: NonNull::new(e).expect("cosy_engine_create returned NULL with COSY_OK") })
    }

    /// Native output sample rate (24000).
    pub fn sample_rate(&self) -> i32 {
        unsafe { sys::cosy_engine_sample_rate(self.ptr.as_ptr()) }
    }

    pub fn stats(&self) -> Result<sys::cosy_engine_stats> {
        let mut s: sys::cosy_engine_stats = unsafe { std::mem::zeroed() };
        unsafe { sys::cosy_engine_stats_init(&mut s, std::mem::size_of_val(&s) as u32) };
        check(unsafe { sys::cosy_engine_get_stats(self.ptr.as_ptr(), &mut s) }, "cosy_engine_get_stats")?;
        Ok(s)
    }

    pub fn load_voice(&self, path: impl AsRef<Path>) -> Result<Voice<'_>> {
        let p = cpath(path.as_ref())?;
        let mut v = ptr::null_mut();
        check(unsafe { sys::cosy_voice_load(self.ptr.as_ptr(), p.as_ptr(), &mut v) }, "cosy_voice_load")?;
        Ok(Voice::wrap(v))
    }

    /// A voice from precomputed features (copied): prompt transcript, prompt speech tokens
    /// (25 Hz, each < 6561), prompt mel (`[frames][80]` flattened, 50 Hz), 192-d speaker embedding.
    pub fn voice_from_features(&self, prompt_text: &str, speech_tokens: &[i32], mel: &[f32],
                               speaker_embedding: &[f32]) -> Result<Voice<'_>> {
        if mel.len() % 80 != 0 {
            return Err(Error {
                status: Status::INVALID_ARG,
                op: "cosyvoice",
                message: format!("mel holds {} values, not a multiple of 80", mel.len()),
            });
        }
        let text = cstring(prompt_text, "prompt_text")?;
        let mut f: sys::cosy_voice_features = unsafe { std::mem::zeroed() };
        unsafe { sys::cosy_voice_features_init(&mut f, std::mem::size_of_val(&f) as u32) };
        f.prompt_text = text.as_ptr();
        f.speech_tokens = speech_tokens.as_ptr();
        f.n_speech_tokens = speech_tokens.len().min(i32::MAX as usize) as i32;
        f.mel = mel.as_ptr();
        f.n_mel_frames = (mel.len() / 80).min(i32::MAX as usize) as i32;
        f.speaker_embedding = speaker_embedding.as_ptr();
        f.speaker_dim = speaker_embedding.len().min(i32::MAX as usize) as i32;
        let mut v = ptr::null_mut();
        check(unsafe { sys::cosy_voice_from_features(self.ptr.as_ptr(), &f, &mut v) },
              "cosy_voice_from_features")?;
        Ok(Voice::wrap(v))
    }

    /// Clone a voice from a recording (`cosy_voice_from_audio`): mono samples in [-1, 1], 0.5 to
    /// 30 s at 16 to 192 kHz, and what is said in it (may be empty). Save the result with
    /// [`Voice::save`] to clone once and load it afterwards.
    pub fn voice_from_audio(&self, pcm: &[f32], sample_rate: i32, transcript: &str)
                            -> Result<Voice<'_>> {
        let text = cstring(transcript, "transcript")?;
        let mut v = ptr::null_mut();
        check(unsafe {
                  sys::cosy_voice_from_audio(self.ptr.as_ptr(), pcm.as_ptr(), pcm.len() as i64,
                                             sample_rate, text.as_ptr(), &mut v)
              },
              "cosy_voice_from_audio")?;
        Ok(Voice::wrap(v))
    }

    /// Blocking synthesis of a whole utterance (mono f32 in [-1, 1]).
    pub fn synthesize(&self, voice: &Voice<'_>, text: &str, p: &Params) -> Result<Vec<f32>> {
        let text = cstring(text, "text")?;
        let (cp, _keep) = p.to_c()?;
        let mut pcm: *mut f32 = ptr::null_mut();
        let mut n: i64 = 0;
        check(unsafe { sys::cosy_synthesize(self.ptr.as_ptr(), voice.ptr.as_ptr(), text.as_ptr(), &cp,
                                            &mut pcm, &mut n) }, "cosy_synthesize")?;
        // SAFETY: the library returned n floats at pcm (freed with cosy_free below).
        let out = if n > 0 { unsafe { std::slice::from_raw_parts(pcm, n as usize) }.to_vec() } else { Vec::new() };
        unsafe { sys::cosy_free(pcm.cast()) };
        Ok(out)
    }

    /// Start a pull-streaming utterance; read it with `Request::read` or iterate it.
    pub fn stream(&self, voice: &Voice<'_>, text: &str, p: &Params) -> Result<Request> {
        let text = cstring(text, "text")?;
        let (cp, _keep) = p.to_c()?;
        let mut r = ptr::null_mut();
        check(unsafe { sys::cosy_request_submit(self.ptr.as_ptr(), voice.ptr.as_ptr(), text.as_ptr(), &cp,
                                                None, ptr::null_mut(), &mut r) }, "cosy_request_submit")?;
        let ptr = NonNull::new(r).expect("cosy_request_submit returned NULL with COSY_OK");
        Ok(Request { inner: Arc::new(RequestHandle { ptr }), chunk: 4800, done: false })
    }

    /// Text streamed in (COSY_SYNTH_TEXT_STREAM): the request starts without text; push it with
    /// the returned [`TextSink`] (it may move to another thread) while the [`Request`] is read.
    /// The audio depends only on the text, not on how it was cut into pushes.
    pub fn stream_text(&self, voice: &Voice<'_>, p: &Params) -> Result<(Request, TextSink)> {
        let (mut cp, _keep) = p.to_c()?;
        cp.flags |= sys::COSY_SYNTH_TEXT_STREAM;
        let mut r = ptr::null_mut();
        check(unsafe { sys::cosy_request_submit(self.ptr.as_ptr(), voice.ptr.as_ptr(), ptr::null(), &cp,
                                                None, ptr::null_mut(), &mut r) }, "cosy_request_submit")?;
        let ptr = NonNull::new(r).expect("cosy_request_submit returned NULL with COSY_OK");
        let inner = Arc::new(RequestHandle { ptr });
        Ok((Request { inner: inner.clone(), chunk: 4800, done: false }, TextSink { inner }))
    }
}

/// The text side of a [`Engine::stream_text`] request: push pieces, then end the text. One
/// thread at a time (it is Send, not Sync); the library allows it beside the reading thread.
pub struct TextSink {
    inner: Arc<RequestHandle>,
}

impl TextSink {
    /// Append a piece of the text (cosy_request_push_text).
    pub fn push(&mut self, text: &str) -> Result<()> {
        let t = cstring(text, "text")?;
        check(unsafe { sys::cosy_request_push_text(self.inner.ptr.as_ptr(), t.as_ptr()) },
              "cosy_request_push_text")
    }

    /// No more text (cosy_request_end_text).
    pub fn end(&mut self) -> Result<()> {
        check(unsafe { sys::cosy_request_end_text(self.inner.ptr.as_ptr()) }, "cosy_request_end_text")
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        unsafe { sys::cosy_engine_destroy(self.ptr.as_ptr()) }
    }
}

/// A speaker; borrows its engine, so it is released before the engine is destroyed.
pub struct Voice<'e> {
    ptr: NonNull<sys::cosy_voice>,
    _engine: PhantomData<&'e Engine>,
}

// SAFETY: voices are immutable and reference counted inside the library.
unsafe impl Send for Voice<'_> {}
unsafe impl Sync for Voice<'_> {}

impl<'e> Voice<'e> {
    fn wrap(v: *mut sys::cosy_voice) -> Voice<'e> {
        Voice { ptr: NonNull::new(v).expect("NULL voice with COSY_OK"), _engine: PhantomData }
    }

    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let p = cpath(path.as_ref())?;
        check(unsafe { sys::cosy_voice_save(self.ptr.as_ptr(), p.as_ptr()) }, "cosy_voice_save")
    }
}

impl Drop for Voice<'_> {
    fn drop(&mut self) {
        unsafe { sys::cosy_voice_release(self.ptr.as_ptr()) }
    }
}

/// Synthesis parameters; 0 / None / false mean the library's defaults.
#[derive(Clone, Debug, Default)]
pub struct Params {
    pub mode: i32, // 0 zero-shot, 1 cross-lingual, 2 instruct
    pub seed: u64, // 0 = from the clock
    pub sample_rate: i32,
    pub instruct_text: Option<String>,
    pub speed: f32,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: i32,
    pub first_chunk_tokens: i32,
    pub max_tokens: i32,
    pub min_tokens: i32,
    pub no_text_normalization: bool,
}

impl Params {
    /// The C struct, and the string its instruct_text points into (keep it alive for the call).
    fn to_c(&self) -> Result<(sys::cosy_synth_params, Option<CString>)> {
        let mut c: sys::cosy_synth_params = unsafe { std::mem::zeroed() };
        unsafe { sys::cosy_synth_params_init(&mut c, std::mem::size_of_val(&c) as u32) };
        c.mode = self.mode;
        c.seed = self.seed;
        c.sample_rate = self.sample_rate;
        c.speed = self.speed;
        c.temperature = self.temperature;
        c.top_p = self.top_p;
        c.top_k = self.top_k;
        c.first_chunk_tokens = self.first_chunk_tokens;
        c.max_tokens = self.max_tokens;
        c.min_tokens = self.min_tokens;
        if self.no_text_normalization {
            c.flags |= sys::COSY_SYNTH_NO_TEXT_NORMALIZATION;
        }
        let keep = match &self.instruct_text {
            Some(s) => Some(cstring(s, "instruct_text")?),
            None => None,
        };
        if let Some(s) = &keep {
            c.instruct_text = s.as_ptr();
        }
        Ok((c, keep))
    }
}

struct RequestHandle {
    ptr: NonNull<sys::cosy_request>,
}

// SAFETY: through a shared RequestHandle only cosy_request_cancel (any thread) and, from the one
// TextSink, cosy_request_push_text / cosy_request_end_text are called (the library allows them
// beside a reader); reads, waits and stats go through the unique Request.
unsafe impl Send for RequestHandle {}
unsafe impl Sync for RequestHandle {}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        unsafe { sys::cosy_request_release(self.ptr.as_ptr()) } // cancels if still running
    }
}

/// One utterance in flight (pull streaming). Dropping it cancels and releases it.
pub struct Request {
    inner: Arc<RequestHandle>,
    chunk: usize,
    done: bool,
}

/// Cancels a request from any thread; keeps the handle alive while it exists.
#[derive(Clone)]
pub struct Canceller {
    inner: Arc<RequestHandle>,
}

impl Canceller {
    pub fn cancel(&self) {
        unsafe { sys::cosy_request_cancel(self.inner.ptr.as_ptr()) }
    }
}

/// `cosy_text_mark`: where the speech for a unit of a request's text (a sentence; a word without
/// text normalization) can start. `[text_begin, text_end)` are UTF-8 byte offsets into the
/// concatenation of every piece pushed; `sample` is the output sample of the first speech token
/// generated after the unit's text entered the LLM, a LOWER BOUND of where it is heard (-1 while
/// not fed yet, and for good when the request ended first); include/cosyvoice.h says exactly what
/// the fields mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextMark {
    pub text_begin: i64,
    pub text_end: i64,
    pub sample: i64,
    /// index of the unit's first text token among the request's
    pub text_token: i32,
    /// `sample`'s speech token among the spoken ones; -1 with `sample`
    pub speech_token: i32,
}

impl Request {
    /// Read up to buf.len() samples, waiting up to timeout_ms (-1 = forever). Ok(0) means the
    /// utterance is finished; Status::CANCELLED after a cancel; Status::TIMEOUT on timeout.
    pub fn read(&mut self, buf: &mut [f32], timeout_ms: i32) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut n: i64 = 0;
        check(unsafe { sys::cosy_request_read(self.inner.ptr.as_ptr(), buf.as_mut_ptr(),
                                              buf.len() as i64, &mut n, timeout_ms) },
              "cosy_request_read")?;
        Ok(n as usize)
    }

    /// Samples per item when iterating (default 4800).
    pub fn with_chunk_size(mut self, n: usize) -> Request {
        self.chunk = n.max(1);
        self
    }

    pub fn cancel(&self) {
        unsafe { sys::cosy_request_cancel(self.inner.ptr.as_ptr()) }
    }

    pub fn canceller(&self) -> Canceller {
        Canceller { inner: Arc::clone(&self.inner) }
    }

    /// Wait for the end (-1 = forever); the request's final status.
    pub fn wait(&mut self, timeout_ms: i32) -> Result<()> {
        check(unsafe { sys::cosy_request_wait(self.inner.ptr.as_ptr(), timeout_ms) }, "cosy_request_wait")
    }

    /// The request's marks so far (`cosy_request_text_marks`), one per committed unit of its
    /// text, in order. Units only get appended and a `sample`, once set (>= 0), never changes:
    /// poll it as the audio plays. A voice agent interrupted at sample n keeps the text of the
    /// marks whose `sample` is below n (at most that was heard) in its conversation history.
    pub fn text_marks(&self) -> Result<Vec<TextMark>> {
        self.text_marks_from(0)
    }

    /// [`Request::text_marks`] from index `first` on (the marks not seen yet, when polling).
    pub fn text_marks_from(&self, first: usize) -> Result<Vec<TextMark>> {
        let mut out = Vec::new();
        // SAFETY: plain data; buf[0].struct_size (set by the library below) gives the stride.
        let mut buf: [sys::cosy_text_mark; 64] = unsafe { std::mem::zeroed() };
        loop {
            let at = first.saturating_add(out.len()).min(i32::MAX as usize) as i32;
            unsafe { sys::cosy_text_mark_init(&mut buf[0], std::mem::size_of::<sys::cosy_text_mark>() as u32) };
            let mut n: i32 = 0;
            check(unsafe { sys::cosy_request_text_marks(self.inner.ptr.as_ptr(), at, buf.as_mut_ptr(),
                                                        buf.len() as i32, &mut n) },
                  "cosy_request_text_marks")?;
            let got = (n as i64 - at as i64).clamp(0, buf.len() as i64) as usize;
            out.extend(buf[..got].iter().map(|m| TextMark {
                text_begin: m.text_begin,
                text_end: m.text_end,
                sample: m.sample,
                text_token: m.text_token,
                speech_token: m.speech_token,
            }));
            if got < buf.len() {
                return Ok(out);
            }
        }
    }

    pub fn stats(&self) -> Result<sys::cosy_request_stats> {
        let mut s: sys::cosy_request_stats = unsafe { std::mem::zeroed() };
        unsafe { sys::cosy_request_stats_init(&mut s, std::mem::size_of_val(&s) as u32) };
        check(unsafe { sys::cosy_request_get_stats(self.inner.ptr.as_ptr(), &mut s) },
              "cosy_request_get_stats")?;
        Ok(s)
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        self.cancel(); // a Canceller may keep the handle; the utterance stops now regardless
    }
}

/// Chunks until the end; a failure (e.g. cancellation) is the last item.
impl Iterator for Request {
    type Item = Result<Vec<f32>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut buf = vec![0f32; self.chunk];
        match self.read(&mut buf, -1) {
            Ok(0) => {
                self.done = true;
                None
            }
            Ok(n) => {
                buf.truncate(n);
                Some(Ok(buf))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The prompt mel of mono audio at any rate in [16000, 192000]: (`[frames][80]` flat, frames).
pub fn audio_to_mel(pcm: &[f32], sample_rate: i32) -> Result<(Vec<f32>, usize)> {
    let mut mel: *mut f32 = ptr::null_mut();
    let mut frames: i32 = 0;
    check(unsafe { sys::cosy_audio_to_mel(pcm.as_ptr(), pcm.len() as i64, sample_rate, &mut mel,
                                          &mut frames) }, "cosy_audio_to_mel")?;
    let n = frames.max(0) as usize * 80;
    let out = if n > 0 { unsafe { std::slice::from_raw_parts(mel, n) }.to_vec() } else { Vec::new() };
    unsafe { sys::cosy_free(mel.cast()) };
    Ok((out, frames.max(0) as usize))
}
