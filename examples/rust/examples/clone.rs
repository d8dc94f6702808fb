//! cargo run --example clone -- MODEL.gguf PROMPT.wav "What the prompt says." VOICE_OUT.gguf OUT.wav "Text."
//! Clones a voice from a recording (16-bit PCM or 32-bit float WAV, 0.5..30 s, 16..192 kHz),
//! saves it, then does what a later run does: loads the saved voice and says something with it
//! into a 16-bit WAV. Fails when the loaded voice does not say what the cloned one says.
use std::io::Write;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 7 {
        eprintln!("usage: clone MODEL.gguf PROMPT.wav TRANSCRIPT VOICE_OUT.gguf OUT.wav TEXT");
        std::process::exit(2);
    }
    let eng = cosyvoice::Engine::new(&a[1])?;
    let (pcm, rate) = cosyvoice::read_wav(&a[2])?;
    let p = cosyvoice::Params { seed: 1, max_tokens: 80, ..Default::default() };
    let t0 = Instant::now();
    let first = {
        let cloned = eng.voice_from_audio(&pcm, rate, &a[3])?;
        println!("cloned a voice from {:.2} s at {} Hz in {:.3} s", pcm.len() as f64 / rate as f64,
                 rate, t0.elapsed().as_secs_f64());
        cloned.save(&a[4])?;
        eng.synthesize(&cloned, &a[6], &p)?
    };
    let voice = eng.load_voice(&a[4])?; // a later run: no cloning
    let out = eng.synthesize(&voice, &a[6], &p)?;
    if out.is_empty() || out != first {
        return Err("the saved voice does not say what the cloned one said".into());
    }
    let rate_out = eng.sample_rate() as u32;
    let mut f = std::io::BufWriter::new(std::fs::File::create(&a[5])?);
    let n = (out.len() * 2) as u32;
    f.write_all(b"RIFF")?;
    f.write_all(&(36 + n).to_le_bytes())?;
    f.write_all(b"WAVEfmt ")?;
    for v in [16u32.to_le_bytes(), [1, 0, 1, 0], rate_out.to_le_bytes(), (rate_out * 2).to_le_bytes(), [2, 0, 16, 0]] {
        f.write_all(&v)?;
    }
    f.write_all(b"data")?;
    f.write_all(&n.to_le_bytes())?;
    for x in &out {
        f.write_all(&((x.clamp(-1.0, 1.0) * 32767.0).round() as i16).to_le_bytes())?;
    }
    f.flush()?;
    println!("saved the voice to {}; {} samples with it in {} (identical to the cloned voice's)",
             a[4], out.len(), a[5]);
    Ok(())
}
