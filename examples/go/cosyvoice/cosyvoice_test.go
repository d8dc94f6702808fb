package cosyvoice

import (
	"errors"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The tests that synthesize need COSY_MODEL and COSY_VOICE (make test-examples sets them to the
// demo model); without them they skip.
const text = "The quick brown fox jumps over the lazy dog, and the morning train was late again."

func open(t *testing.T) (*Engine, *Voice) {
	t.Helper()
	model, voice := os.Getenv("COSY_MODEL"), os.Getenv("COSY_VOICE")
	if model == "" || voice == "" {
		t.Skip("set COSY_MODEL and COSY_VOICE")
	}
	e, err := NewEngine(Config{ModelPath: model, Device: DeviceCPU, MaxActive: 2})
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.LoadVoice(voice)
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close(); e.Close() })
	return e, v
}

func collect(t *testing.T, s *Stream) ([]float32, int) {
	var out []float32
	n := 0
	for c := range s.C {
		out = append(out, c...)
		n++
	}
	return out, n
}

func TestErrors(t *testing.T) {
	_, err := NewEngine(Config{ModelPath: "/nonexistent/model.gguf", Device: DeviceCPU})
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *Error, got %v", err)
	}
	if ce.Status != StatusIO || !strings.Contains(ce.Message, "/nonexistent/model.gguf") {
		t.Fatalf("unexpected error %v", ce)
	}
	_, err = NewEngine(Config{ModelPath: "x.gguf", Device: -7})
	if !errors.As(err, &ce) || ce.Status != StatusInvalidArg || ce.Message == "" {
		t.Fatalf("unexpected error %v", err)
	}
	if StatusCancelled.String() == "" || Version() == "" {
		t.Fatal("empty status text or version")
	}
	t.Logf("library %s; error text: %v", Version(), err)
}

func TestBlockingEqualsStream(t *testing.T) {
	e, v := open(t)
	p := &Params{Seed: 1234, MaxTokens: 120}
	blk, err := e.Synthesize(v, text, p)
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Stream(v, text, p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, chunks := collect(t, s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(blk) || len(blk) == 0 {
		t.Fatalf("streamed %d samples, blocking %d", len(got), len(blk))
	}
	for i := range blk {
		if got[i] != blk[i] || math.IsNaN(float64(blk[i])) {
			t.Fatalf("sample %d: streamed %g, blocking %g", i, got[i], blk[i])
		}
	}
	if !st.Done || st.Samples != int64(len(blk)) {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d samples identical; %d channel chunks, %d engine chunks, ttfb %.3f s",
		len(blk), chunks, st.Chunks, st.TTFB)
	es, err := e.Stats()
	if err != nil || es.RequestsDone < 2 {
		t.Fatalf("engine stats %+v, %v", es, err)
	}
}

// Text streamed in: the words pushed one at a time (with a small delay) give the audio and the
// text marks of the text pushed at once; the marks cover the text in order (contiguous byte
// ranges from 0 to its end, samples in order and within the audio, Sample = SpeechToken * 960 at
// 24 kHz). The text has several sentences, so that the later ones enter the LLM after speech has
// begun (the first ones go in with the voice's prompt: their marks are 0).
func TestTextStream(t *testing.T) {
	e, v := open(t)
	p := &Params{Seed: 5, MaxTokens: 200}
	reply := text + " Nobody was surprised. The fox took the bus instead, and it was early."
	run := func(words bool) ([]float32, []TextMark) {
		s, err := e.StreamText(v, p)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		go func() {
			if words {
				for i, w := range strings.Split(reply, " ") {
					if i > 0 {
						w = " " + w
					}
					if err := s.PushText(w); err != nil {
						t.Error(err)
					}
					time.Sleep(5 * time.Millisecond)
				}
			} else if err := s.PushText(reply); err != nil {
				t.Error(err)
			}
			if err := s.EndText(); err != nil {
				t.Error(err)
			}
		}()
		got, _ := collect(t, s)
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		marks, err := s.TextMarks() // complete once the audio has ended
		if err != nil {
			t.Fatal(err)
		}
		return got, marks
	}
	one, marks1 := run(false)
	words, marks := run(true)
	if len(one) == 0 || len(one) != len(words) {
		t.Fatalf("one piece %d samples, word by word %d", len(one), len(words))
	}
	for i := range one {
		if one[i] != words[i] {
			t.Fatalf("sample %d: one piece %g, word by word %g", i, one[i], words[i])
		}
	}
	if len(marks) == 0 || len(marks) != len(marks1) || marks[len(marks)-1].TextEnd != int64(len(reply)) {
		t.Fatalf("marks %+v (one piece %+v) for %d bytes", marks, marks1, len(reply))
	}
	rate := int64(e.SampleRate())
	ended := false // a unit that never entered the LLM (Sample -1): so do all after it
	for i, m := range marks {
		begin := int64(0)
		if i > 0 {
			begin = marks[i-1].TextEnd
		}
		ok := m == marks1[i] && m.TextBegin == begin && m.TextEnd > m.TextBegin
		if m.Sample < 0 {
			ok = ok && m.Sample == -1 && m.SpeechToken == -1
		} else {
			ok = ok && !ended && m.Sample <= int64(len(words)) &&
				(i == 0 || m.Sample >= marks[i-1].Sample) &&
				m.Sample == int64(m.SpeechToken)*960*rate/24000
		}
		if !ok {
			t.Fatalf("mark %d: %+v (one piece %+v, all %+v, %d samples)", i, m, marks1[i], marks,
				len(words))
		}
		ended = ended || m.Sample < 0
		t.Logf("bytes [%d, %d) %q: can be heard from sample %d", m.TextBegin, m.TextEnd,
			reply[m.TextBegin:m.TextEnd], m.Sample)
	}
	t.Logf("text streamed word by word: %d samples and %d marks, identical to one piece",
		len(one), len(marks))
}

func TestCancel(t *testing.T) {
	e, v := open(t)
	s, err := e.Stream(v, text, &Params{Seed: 9, MaxTokens: 600, MinTokens: 600})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := <-s.C
	if len(first) == 0 {
		t.Fatal("no first chunk")
	}
	t0 := time.Now()
	go s.Cancel() // from another goroutine
	collect(t, s)
	var ce *Error
	if err := s.Err(); !errors.As(err, &ce) || ce.Status != StatusCancelled {
		t.Fatalf("want StatusCancelled, got %v", err)
	}
	st, _ := s.Stats()
	// the LLM may run ahead of the audio; the cancel must stop the audio (600 tokens = 576000 samples)
	if st.Samples >= 600*960 {
		t.Fatalf("not cancelled early: %d samples", st.Samples)
	}
	s.Cancel() // idempotent
	s.Close()
	s.Close()
	t.Logf("cancelled after %v at %d of 600 tokens", time.Since(t0), st.SpeechTokens)

	// closing a stream nobody reads must not hang
	s2, err := e.Stream(v, text, &Params{Seed: 3, MaxTokens: 60})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
}

func TestVoiceFeaturesRoundTrip(t *testing.T) {
	e, v := open(t)
	_ = v
	rng := rand.New(rand.NewSource(5))
	f := Features{PromptText: "A made up prompt.<|endofprompt|>"}
	for i := 0; i < 40; i++ {
		f.SpeechTokens = append(f.SpeechTokens, int32(rng.Intn(6561)))
	}
	for i := 0; i < 80*80; i++ {
		f.Mel = append(f.Mel, float32(-6+2*math.Sin(float64(i)/37)))
	}
	for i := 0; i < 192; i++ {
		f.SpeakerEmbedding = append(f.SpeakerEmbedding, float32(rng.NormFloat64()))
	}
	made, err := e.VoiceFromFeatures(f)
	if err != nil {
		t.Fatal(err)
	}
	defer made.Close()
	path := filepath.Join(t.TempDir(), "made.voice.gguf")
	if err := made.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := e.LoadVoice(path)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	p := &Params{Seed: 77, MaxTokens: 50}
	a, err := e.Synthesize(made, "Hello there.", p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Synthesize(back, "Hello there.", p)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("lengths %d %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("sample %d differs", i)
		}
	}
	f.SpeakerEmbedding = f.SpeakerEmbedding[:10]
	_, err = e.VoiceFromFeatures(f)
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != StatusInvalidArg {
		t.Fatalf("want StatusInvalidArg, got %v", err)
	}
}

// TestCloneFromWAV: a voice cloned from COSY_PROMPT_WAV (make test-examples sets it), saved and
// loaded, says the same as before saving; bad audio gets StatusInvalidArg.
func TestCloneFromWAV(t *testing.T) {
	e, _ := open(t)
	path := os.Getenv("COSY_PROMPT_WAV")
	if path == "" {
		t.Skip("set COSY_PROMPT_WAV")
	}
	pcm, rate, err := ReadWAV(path)
	if err != nil {
		t.Fatal(err)
	}
	made, err := e.VoiceFromAudio(pcm, rate, "What the prompt says.")
	if err != nil {
		t.Fatal(err)
	}
	defer made.Close()
	file := filepath.Join(t.TempDir(), "cloned.voice.gguf")
	if err := made.Save(file); err != nil {
		t.Fatal(err)
	}
	back, err := e.LoadVoice(file)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	p := &Params{Seed: 5, MaxTokens: 40}
	a, err := e.Synthesize(made, "Hello there.", p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Synthesize(back, "Hello there.", p)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("lengths %d %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("sample %d differs", i)
		}
	}
	for _, bad := range []struct {
		pcm  []float32
		want string
	}{{make([]float32, rate), "silent"}, {pcm[:rate/4], "0.5 s"}} {
		_, err := e.VoiceFromAudio(bad.pcm, rate, "")
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != StatusInvalidArg || !strings.Contains(ce.Message, bad.want) {
			t.Fatalf("%s: want StatusInvalidArg, got %v", bad.want, err)
		}
	}
}
