//! cargo run --example say -- MODEL.gguf VOICE.gguf OUT.wav "Text to say."
//! Streams the utterance and writes a 16-bit WAV; prints TTFB and RTF.
use std::io::Write;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: say MODEL.gguf VOICE.gguf OUT.wav TEXT");
        std::process::exit(2);
    }
    let eng = cosyvoice::Engine::new(&a[1])?;
    let voice = eng.load_voice(&a[2])?;
    let t0 = Instant::now();
    let mut ttfb = None;
    let mut pcm: Vec<i16> = Vec::new();
    for chunk in eng.stream(&voice, &a[4], &cosyvoice::Params { seed: 1, ..Default::default() })? {
        ttfb.get_or_insert_with(|| t0.elapsed());
        pcm.extend(chunk?.iter().map(|x| (x.clamp(-1.0, 1.0) * 32767.0).round() as i16));
    }
    let wall = t0.elapsed().as_secs_f64();
    let rate = eng.sample_rate() as u32;
    let mut f = std::io::BufWriter::new(std::fs::File::create(&a[3])?);
    let n = (pcm.len() * 2) as u32;
    f.write_all(b"RIFF")?;
    f.write_all(&(36 + n).to_le_bytes())?;
    f.write_all(b"WAVEfmt ")?;
    for v in [16u32.to_le_bytes(), [1, 0, 1, 0], rate.to_le_bytes(), (rate * 2).to_le_bytes(), [2, 0, 16, 0]] {
        f.write_all(&v)?;
    }
    f.write_all(b"data")?;
    f.write_all(&n.to_le_bytes())?;
    for s in &pcm {
        f.write_all(&s.to_le_bytes())?;
    }
    f.flush()?;
    let audio = pcm.len() as f64 / rate as f64;
    println!("{} samples ({:.2} s), TTFB {:.3} s, RTF {:.3}; wrote {}", pcm.len(), audio,
             ttfb.map_or(0.0, |d| d.as_secs_f64()), wall / audio, a[3]);
    Ok(())
}
