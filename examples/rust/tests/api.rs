//! `cargo test --offline`. The synthesis tests need COSY_MODEL and COSY_VOICE (make
//! test-examples points them at the demo model) and pass trivially, saying SKIP, without them.
use cosyvoice::{sys, Engine, EngineOptions, Params, Status};
use std::mem::{size_of, MaybeUninit};
use std::process::Command;

const TEXT: &str = "The quick brown fox jumps over the lazy dog, and the morning train was late again.";

fn engine() -> Option<(Engine, String)> {
    match (std::env::var("COSY_MODEL"), std::env::var("COSY_VOICE")) {
        (Ok(m), Ok(v)) => {
            let o = EngineOptions { max_active: 2, ..EngineOptions::default() };
            Some((Engine::with_options(&m, &o).expect("engine"), v))
        }
        _ => {
            eprintln!("SKIP: set COSY_MODEL and COSY_VOICE");
            None
        }
    }
}

#[test]
fn errors_carry_status_and_message() {
    let e = Engine::new("/nonexistent/model.gguf").err().expect("no error");
    assert_eq!(e.status, Status::IO);
    assert!(e.message.contains("/nonexistent/model.gguf"), "{}", e);
    assert_eq!(e.op, "cosy_engine_create");
    let o = EngineOptions { device: -5, ..EngineOptions::default() };
    let e = Engine::with_options("x.gguf", &o).err().expect("no error");
    assert_eq!(e.status, Status::INVALID_ARG);
    assert!(!e.message.is_empty());
    assert_eq!(Status::CANCELLED.text(), "cancelled");
    eprintln!("library {}; {}", cosyvoice::version(), e);
}

fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

macro_rules! layout {
    ($out:ident, $t:ident, $($f:ident),*) => {{
        let u = MaybeUninit::<sys::$t>::uninit();
        let b = u.as_ptr();
        $out.push(format!("struct {} {}", stringify!($t), size_of::<sys::$t>()));
        $(
            // SAFETY: addr_of! on an uninitialised value only computes the address.
            let p = unsafe { std::ptr::addr_of!((*b).$f) };
            $out.push(format!("field {} {} {} {}", stringify!($t), stringify!($f),
                              p as usize - b as usize, pointee_size(p)));
        )*
    }};
}

/// The #[repr(C)] mirrors against the C compiler's layout (../c/abi_layout.c).
#[test]
fn struct_layout_matches_header() {
    let cflags = match Command::new("pkg-config").args(["--cflags", "cosyvoice"]).output() {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap(),
        _ => return eprintln!("SKIP: no pkg-config"),
    };
    let dir = std::env::temp_dir().join(format!("cosy-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("abi_layout");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../c/abi_layout.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = match Command::new(&cc).arg("-std=c11").arg(src).args(cflags.split_whitespace())
        .arg("-o").arg(&exe).status() {
        Ok(s) => s,
        Err(_) => return eprintln!("SKIP: no C compiler"),
    };
    assert!(st.success(), "compiling abi_layout.c failed");
    let c_out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let mut rust = Vec::new();
    layout!(rust, cosy_engine_config, struct_size, flags, model_path, device, gpu_memory_fraction,
            max_active, max_queued, cpu_threads, log_level, log_fn, log_user,
            first_chunk_wait_max, vocoder_precision);
    layout!(rust, cosy_engine_stats, struct_size, reserved, weights_bytes, kv_bytes, workspace_bytes,
            device_bytes_total, kv_pages_total, kv_pages_used, active, queued, requests_done,
            audio_samples_out, llm_steps, llm_step_rows, flow_calls, flow_jobs, vocoder_calls,
            vocoder_jobs, flow_pages_total, flow_pages_used);
    layout!(rust, cosy_voice_features, struct_size, reserved, prompt_text, speech_tokens,
            n_speech_tokens, n_mel_frames, mel, speaker_embedding, speaker_dim, reserved2);
    layout!(rust, cosy_synth_params, struct_size, flags, mode, sample_rate, instruct_text, speed,
            temperature, top_p, top_k, seed, first_chunk_tokens, max_tokens, min_tokens, reserved);
    layout!(rust, cosy_chunk, struct_size, flags, pcm, n_samples, offset, sample_rate, reserved);
    layout!(rust, cosy_request_stats, struct_size, reserved, ttfb_s, total_s, llm_s, flow_s,
            vocoder_s, n_samples, n_text_tokens, n_speech_tokens, n_chunks, done);
    layout!(rust, cosy_text_mark, struct_size, reserved, text_begin, text_end, sample, text_token,
            speech_token);
    let c: Vec<&str> = c_out.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(c, rust.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    eprintln!("{} layout lines match the C compiler", c.len());
}

#[test]
fn blocking_equals_streamed() {
    let (eng, vpath) = match engine() { Some(x) => x, None => return };
    let voice = eng.load_voice(&vpath).expect("voice");
    let p = Params { seed: 1234, max_tokens: 120, ..Params::default() };
    let blk = eng.synthesize(&voice, TEXT, &p).expect("synthesize");
    assert!(!blk.is_empty() && blk.iter().all(|x| x.is_finite() && x.abs() <= 1.0));
    let mut req = eng.stream(&voice, TEXT, &p).expect("stream").with_chunk_size(997);
    let mut got = Vec::new();
    let mut reads = 0;
    for c in &mut req {
        got.extend(c.expect("chunk"));
        reads += 1;
    }
    req.wait(0).expect("wait");
    let s = req.stats().expect("stats");
    assert_eq!(got.len(), blk.len());
    assert!(got == blk, "streamed audio differs from blocking audio");
    assert_eq!(s.done, 1);
    assert_eq!(s.n_samples as usize, blk.len());
    assert!(eng.stats().expect("engine stats").requests_done >= 2);
    eprintln!("{} samples identical ({} reads, {} engine chunks, ttfb {:.3} s)", blk.len(), reads,
              s.n_chunks, s.ttfb_s);
}

/// Text streamed in: the words pushed one at a time (from another thread) give the audio and the
/// text marks of the text pushed at once; the marks cover the text in order (contiguous byte
/// ranges from 0 to its end, samples in order and within the audio, sample = speech_token * 960
/// at 24 kHz). The text has several sentences, so that the later ones enter the LLM after speech
/// has begun (the first ones go in with the voice's prompt: their marks are 0).
#[test]
fn text_streamed_word_by_word() {
    let (eng, vpath) = match engine() { Some(x) => x, None => return };
    let voice = eng.load_voice(&vpath).expect("voice");
    let p = Params { seed: 5, max_tokens: 200, ..Params::default() };
    let reply = format!("{} Nobody was surprised. The fox took the bus instead, and it was early.", TEXT);
    let run = |words: bool| -> (Vec<f32>, Vec<cosyvoice::TextMark>) {
        let (mut req, mut sink) = eng.stream_text(&voice, &p).expect("stream_text");
        let text = reply.clone();
        let pusher = std::thread::spawn(move || {
            if words {
                for (i, w) in text.split(' ').enumerate() {
                    sink.push(&if i == 0 { w.to_string() } else { format!(" {}", w) }).expect("push");
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            } else {
                sink.push(&text).expect("push");
            }
            sink.end().expect("end_text");
            assert!(sink.push("late").is_err()); // after end_text
        });
        let pcm: Vec<f32> = (&mut req).flat_map(|c| c.expect("chunk")).collect();
        pusher.join().unwrap();
        let marks = req.text_marks().expect("text_marks"); // complete once the audio has ended
        (pcm, marks)
    };
    let (one, marks1) = run(false);
    let (words, marks) = run(true);
    assert!(!one.is_empty());
    assert!(one == words, "word by word differs from one piece");
    assert_eq!(marks, marks1, "the marks of word by word and one piece differ");
    assert!(!marks.is_empty() && marks[marks.len() - 1].text_end == reply.len() as i64, "{:?}", marks);
    let rate = eng.sample_rate() as i64;
    let mut ended = false; // a unit that never entered the LLM (sample -1): so do all after it
    for (i, m) in marks.iter().enumerate() {
        let begin = if i == 0 { 0 } else { marks[i - 1].text_end };
        let ok = m.text_begin == begin && m.text_end > m.text_begin
            && if m.sample < 0 {
                m.sample == -1 && m.speech_token == -1
            } else {
                !ended && m.sample <= words.len() as i64 && (i == 0 || m.sample >= marks[i - 1].sample)
                    && m.sample == m.speech_token as i64 * 960 * rate / 24000
            };
        assert!(ok, "mark {}: {:?} (all {:?}, {} samples)", i, m, marks, words.len());
        ended = ended || m.sample < 0;
        eprintln!("bytes [{}, {}) {:?}: can be heard from sample {}", m.text_begin, m.text_end,
                  &reply[m.text_begin as usize..m.text_end as usize], m.sample);
    }
    eprintln!("text streamed word by word: {} samples and {} marks, identical to one piece",
              one.len(), marks.len());
}

#[test]
fn cancel_from_another_thread() {
    let (eng, vpath) = match engine() { Some(x) => x, None => return };
    let voice = eng.load_voice(&vpath).expect("voice");
    let p = Params { seed: 9, max_tokens: 600, min_tokens: 600, ..Params::default() };
    let mut req = eng.stream(&voice, TEXT, &p).expect("stream");
    let mut buf = vec![0f32; 256];
    assert!(req.read(&mut buf, -1).expect("first read") > 0);
    let c = req.canceller();
    let t = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        c.cancel(); // while the test thread is blocked in read
    });
    let last = (&mut req).last().expect("no items");
    t.join().unwrap();
    let e = last.expect_err("ended without error");
    assert_eq!(e.status, Status::CANCELLED, "{}", e);
    assert_eq!(req.wait(-1).err().map(|e| e.status), Some(Status::CANCELLED));
    let s = req.stats().expect("stats");
    // the LLM may run ahead of the audio; the cancel must stop the audio (600 tokens = 576000 samples)
    assert!(s.n_samples < 600 * 960, "{}", s.n_samples);
    eprintln!("cancelled at {} of 600 tokens", s.n_speech_tokens);
    // a request dropped while running, and a request moved to another thread
    drop(eng.stream(&voice, TEXT, &p).expect("stream"));
    let req = eng.stream(&voice, "Hello there.", &Params { seed: 2, max_tokens: 40, ..Params::default() })
        .expect("stream");
    let n: usize = std::thread::spawn(move || req.map(|c| c.expect("chunk").len()).sum()).join().unwrap();
    assert!(n > 0);
}

#[test]
fn voice_from_features_save_load() {
    let (eng, _) = match engine() { Some(x) => x, None => return };
    let tone: Vec<f32> = (0..48000).map(|i| 0.3 * (i as f32 * 0.047).sin()).collect();
    let (mel, frames) = cosyvoice::audio_to_mel(&tone, 24000).expect("mel");
    assert!(frames > 90 && mel.len() == frames * 80);
    let tokens: Vec<i32> = (0..(frames / 2) as i32).map(|i| (i * 7919) % 6561).collect();
    let spk: Vec<f32> = (0..192).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
    let made = eng.voice_from_features("A made up prompt.<|endofprompt|>", &tokens, &mel, &spk)
        .expect("from features");
    let path = std::env::temp_dir().join(format!("cosy-voice-{}.gguf", std::process::id()));
    made.save(&path).expect("save");
    let back = eng.load_voice(&path).expect("load");
    std::fs::remove_file(&path).ok();
    let p = Params { seed: 77, max_tokens: 50, ..Params::default() };
    let a = eng.synthesize(&made, "Hello there.", &p).expect("a");
    let b = eng.synthesize(&back, "Hello there.", &p).expect("b");
    assert!(!a.is_empty() && a == b);
    let e = eng.voice_from_features("", &tokens, &mel, &spk[..10]).err().expect("no error");
    assert_eq!(e.status, Status::INVALID_ARG);
    assert!(e.message.contains("192"), "{}", e);
}

/// A voice cloned from COSY_PROMPT_WAV (make test-examples sets it), saved and loaded, says the
/// same as before saving; silence and too-short audio get INVALID_ARG; read_wav reads a float WAV.
#[test]
fn clone_from_wav() {
    let Some((eng, _)) = engine() else { return };
    let Ok(path) = std::env::var("COSY_PROMPT_WAV") else {
        eprintln!("SKIP: set COSY_PROMPT_WAV");
        return;
    };
    let (pcm, rate) = cosyvoice::read_wav(&path).expect("read_wav");
    let made = eng.voice_from_audio(&pcm, rate, "What the prompt says.").expect("clone");
    let file = std::env::temp_dir().join(format!("cosy-rust-clone-{}.gguf", std::process::id()));
    made.save(&file).expect("save");
    let back = eng.load_voice(&file).expect("load");
    let _ = std::fs::remove_file(&file);
    let p = Params { seed: 5, max_tokens: 40, ..Params::default() };
    let a = eng.synthesize(&made, "Hello there.", &p).expect("synth");
    let b = eng.synthesize(&back, "Hello there.", &p).expect("synth");
    assert!(!a.is_empty() && a == b, "{} vs {} samples", a.len(), b.len());
    for (bad, want) in [(vec![0.0f32; rate as usize], "silent"), (pcm[..rate as usize / 4].to_vec(), "0.5 s")] {
        let e = eng.voice_from_audio(&bad, rate, "").err().expect("accepted bad audio");
        assert_eq!(e.status, Status::INVALID_ARG);
        assert!(e.message.contains(want), "{}", e);
    }
    // a float WAV written here reads back exactly
    let wav = std::env::temp_dir().join(format!("cosy-rust-f32-{}.wav", std::process::id()));
    let vals = [0.5f32, -0.25, 0.125];
    let mut b = Vec::new();
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(4 + 8 + 16 + 8 + 12u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    for v in [16u32.to_le_bytes(), [3, 0, 1, 0], 24000u32.to_le_bytes(), 96000u32.to_le_bytes(), [4, 0, 32, 0]] {
        b.extend_from_slice(&v);
    }
    b.extend_from_slice(b"data");
    b.extend_from_slice(&12u32.to_le_bytes());
    for v in vals {
        b.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(&wav, &b).expect("write");
    let (x, r) = cosyvoice::read_wav(&wav).expect("read float wav");
    let _ = std::fs::remove_file(&wav);
    assert_eq!((x.as_slice(), r), (&vals[..], 24000));
}
