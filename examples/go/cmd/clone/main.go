// Command clone makes a voice from a recording, saves it, and says something with it.
//
//	go run ./cmd/clone -model M.gguf -prompt prompt.wav -transcript "What the prompt says." \
//	    -save voice.gguf -o out.wav "Text to say."
//
// The voice file written with -save is what later runs load instead of cloning again
// (cmd/say -voice voice.gguf).
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/libcosyvoice/libcosyvoice/examples/go/cosyvoice"
)

func main() {
	model := flag.String("model", "", "model file (.gguf) with the front-end models")
	prompt := flag.String("prompt", "", "prompt recording (WAV, 16-bit PCM or 32-bit float, 0.5..30 s)")
	transcript := flag.String("transcript", "", "what is said in the prompt")
	save := flag.String("save", "voice.gguf", "where to write the cloned voice")
	out := flag.String("o", "out.wav", "output WAV")
	seed := flag.Uint64("seed", 1, "sampling seed")
	flag.Parse()
	if *model == "" || *prompt == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: clone -model M.gguf -prompt P.wav [-transcript T] [-save V.gguf] [-o out.wav] TEXT")
		os.Exit(2)
	}
	if err := run(*model, *prompt, *transcript, *save, *out, strings.Join(flag.Args(), " "), *seed); err != nil {
		fmt.Fprintln(os.Stderr, "clone:", err)
		os.Exit(1)
	}
}

func run(model, prompt, transcript, save, out, text string, seed uint64) error {
	eng, err := cosyvoice.NewEngine(cosyvoice.Config{ModelPath: model, Device: cosyvoice.DeviceCPU})
	if err != nil {
		return err
	}
	defer eng.Close()
	pcm, rate, err := cosyvoice.ReadWAV(prompt)
	if err != nil {
		return err
	}
	t0 := time.Now()
	v, err := eng.VoiceFromAudio(pcm, rate, transcript)
	if err != nil {
		return err
	}
	fmt.Printf("cloned a voice from %.2f s at %d Hz in %.3f s\n", float64(len(pcm))/float64(rate),
		rate, time.Since(t0).Seconds())
	err = v.Save(save)
	v.Close()
	if err != nil {
		return err
	}
	// what a later run does: load the saved voice instead of cloning again
	v, err = eng.LoadVoice(save)
	if err != nil {
		return err
	}
	defer v.Close()
	wav, err := eng.Synthesize(v, text, &cosyvoice.Params{Seed: seed})
	if err != nil {
		return err
	}
	if err := writeWAV(out, wav, eng.SampleRate()); err != nil {
		return err
	}
	fmt.Printf("saved the voice to %s; %d samples (%.2f s) with it in %s\n", save, len(wav),
		float64(len(wav))/float64(eng.SampleRate()), out)
	return nil
}

func writeWAV(path string, x []float32, rate int) error {
	pcm := make([]int16, len(x))
	for i, v := range x {
		pcm[i] = int16(math.Round(math.Max(-1, math.Min(1, float64(v))) * 32767))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	n := uint32(2 * len(pcm))
	hdr := []interface{}{[4]byte{'R', 'I', 'F', 'F'}, 36 + n, [8]byte{'W', 'A', 'V', 'E', 'f', 'm', 't', ' '},
		uint32(16), uint16(1), uint16(1), uint32(rate), uint32(2 * rate), uint16(2), uint16(16),
		[4]byte{'d', 'a', 't', 'a'}, n, pcm}
	for _, h := range hdr {
		if err := binary.Write(f, binary.LittleEndian, h); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
