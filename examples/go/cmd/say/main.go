// Command say streams an utterance from libcosyvoice into a 16-bit WAV file.
//
//	go run ./cmd/say -model M.gguf -voice V.gguf -o out.wav "Text to say."
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
	model := flag.String("model", "", "model file (.gguf)")
	voice := flag.String("voice", "", "voice file")
	out := flag.String("o", "out.wav", "output WAV")
	seed := flag.Uint64("seed", 1, "sampling seed")
	flag.Parse()
	if *model == "" || *voice == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: say -model M.gguf -voice V.gguf [-o out.wav] TEXT")
		os.Exit(2)
	}
	if err := run(*model, *voice, *out, strings.Join(flag.Args(), " "), *seed); err != nil {
		fmt.Fprintln(os.Stderr, "say:", err)
		os.Exit(1)
	}
}

func run(model, voicePath, out, text string, seed uint64) error {
	eng, err := cosyvoice.NewEngine(cosyvoice.Config{ModelPath: model, Device: cosyvoice.DeviceCPU})
	if err != nil {
		return err
	}
	defer eng.Close()
	v, err := eng.LoadVoice(voicePath)
	if err != nil {
		return err
	}
	defer v.Close()
	t0 := time.Now()
	s, err := eng.Stream(v, text, &cosyvoice.Params{Seed: seed})
	if err != nil {
		return err
	}
	defer s.Close()
	var pcm []int16
	var ttfb time.Duration
	for chunk := range s.C { // filled by the library-reading goroutine
		if ttfb == 0 {
			ttfb = time.Since(t0)
		}
		for _, x := range chunk {
			pcm = append(pcm, int16(math.Round(math.Max(-1, math.Min(1, float64(x)))*32767)))
		}
	}
	if err := s.Err(); err != nil {
		return err
	}
	wall := time.Since(t0)
	rate := eng.SampleRate()
	if err := writeWAV(out, pcm, rate); err != nil {
		return err
	}
	audio := float64(len(pcm)) / float64(rate)
	fmt.Printf("%d samples (%.2f s), TTFB %.3f s, RTF %.3f; wrote %s\n", len(pcm), audio,
		ttfb.Seconds(), wall.Seconds()/audio, out)
	return nil
}

func writeWAV(path string, pcm []int16, rate int) error {
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
