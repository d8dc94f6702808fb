// Package cosyvoice calls libcosyvoice (text to speech, Fun-CosyVoice3) through cgo.
//
// The library is found with pkg-config (PKG_CONFIG_PATH for a prefix other than /usr or
// /usr/local; LD_LIBRARY_PATH at run time when it is not in the loader's path).
//
//	eng, err := cosyvoice.NewEngine(cosyvoice.Config{ModelPath: "model.gguf"})
//	voice, err := eng.LoadVoice("voice.gguf")     // or clone one from a recording:
//	pcm, rate, err := cosyvoice.ReadWAV("prompt.wav")
//	voice, err = eng.VoiceFromAudio(pcm, rate, "What the prompt says.")
//	pcm, err := eng.Synthesize(voice, "Hello.", &cosyvoice.Params{Seed: 42})  // blocking
//	s, err := eng.Stream(voice, "Hello.", nil)                              // streaming
//	for chunk := range s.C { play(chunk) }
//	if err := s.Err(); err != nil { ... }
//	s.Close(); voice.Close(); eng.Close()
//	t, err := eng.StreamText(voice, nil)          // text streamed in: t.PushText(piece) ...,
//	marks, err := t.TextMarks()                   // t.EndText(); where each sentence can start
//
// Streaming uses the library's pull API: a goroutine calls cosy_request_read in a loop and sends
// each chunk ([]float32, mono, [-1, 1]) on the channel Stream.C, which is closed at the end; Err
// then tells how it ended (nil, or an *Error with StatusCancelled after Cancel).
//
// Errors are *Error values carrying the cosy_status and cosy_last_error()'s message. That message
// is thread-local in C, so every wrapper locks its goroutine to the OS thread for the call and
// the read of the message (runtime.LockOSThread).
//
// Handles are freed with Close, never by the garbage collector: close streams and voices before
// their engine. An Engine and a Voice may be used from many goroutines at once; a Stream's Cancel
// may be called from any goroutine.
package cosyvoice

/*
#cgo pkg-config: cosyvoice
#include <stdlib.h>
#include <cosyvoice.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Status is a cosy_status code (values pinned by the C header).
type Status int32

// The status codes.
const (
	StatusOK           Status = 0
	StatusInvalidArg   Status = 1
	StatusStructSize   Status = 2
	StatusNoMemory     Status = 3
	StatusGPUNoMemory  Status = 4
	StatusCUDA         Status = 5
	StatusDeviceLost   Status = 6
	StatusIO           Status = 7
	StatusModelFormat  Status = 8
	StatusModelVersion Status = 9
	StatusUnsupported  Status = 10
	StatusCancelled    Status = 11
	StatusTimeout      Status = 12
	StatusQueueFull    Status = 13
	StatusText         Status = 14
	StatusInternal     Status = 99
)

// DeviceCPU selects the CPU path (Config.Device).
const DeviceCPU = -1

// Synthesis modes (Params.Mode).
const (
	ModeZeroShot     = 0
	ModeCrossLingual = 1
	ModeInstruct     = 2
)

// String is the library's text for the status.
func (s Status) String() string { return C.GoString(C.cosy_status_str(C.cosy_status(s))) }

// Error is a failed library call.
type Error struct {
	Status  Status
	Op      string // the C function
	Message string // cosy_last_error()
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%d): %s", e.Op, e.Status, int32(e.Status), e.Message)
}

// check must run on the OS thread that made the call (callers hold runtime.LockOSThread).
func check(st C.cosy_status, op string) error {
	if st == C.COSY_OK {
		return nil
	}
	return &Error{Status: Status(st), Op: op, Message: C.GoString(C.cosy_last_error())}
}

// Version is the loaded library's version string, e.g. "0.1.0 (cpu only)".
func Version() string { return C.GoString(C.cosy_version_string()) }

// Config of an engine; zero values mean the library's defaults, except Device (0 = first GPU):
// use DeviceCPU for the CPU path.
type Config struct {
	ModelPath  string
	Device     int
	CPUThreads int
	MaxActive  int
	MaxQueued  int
}

// Engine holds the weights and the engine's threads.
type Engine struct {
	p *C.cosy_engine
}

// NewEngine loads the model and starts the engine.
func NewEngine(cfg Config) (*Engine, error) {
	var c C.cosy_engine_config
	C.cosy_engine_config_init(&c, C.uint32_t(unsafe.Sizeof(c)))
	path := C.CString(cfg.ModelPath)
	defer C.free(unsafe.Pointer(path))
	c.model_path = path
	c.device = C.int32_t(cfg.Device)
	c.cpu_threads = C.int32_t(cfg.CPUThreads)
	c.max_active = C.int32_t(cfg.MaxActive)
	c.max_queued = C.int32_t(cfg.MaxQueued)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var p *C.cosy_engine
	if err := check(C.cosy_engine_create(&c, &p), "cosy_engine_create"); err != nil {
		return nil, err
	}
	return &Engine{p: p}, nil
}

// Close cancels every request and frees the engine. Close its voices first.
func (e *Engine) Close() {
	if e.p != nil {
		C.cosy_engine_destroy(e.p)
		e.p = nil
	}
}

// SampleRate is the model's native output rate (24000).
func (e *Engine) SampleRate() int { return int(C.cosy_engine_sample_rate(e.p)) }

// EngineStats is cosy_engine_stats.
type EngineStats struct {
	WeightsBytes, KVBytes, WorkspaceBytes int64
	Active, Queued                        int
	RequestsDone, AudioSamplesOut         int64
}

// Stats of the engine.
func (e *Engine) Stats() (EngineStats, error) {
	var s C.cosy_engine_stats
	C.cosy_engine_stats_init(&s, C.uint32_t(unsafe.Sizeof(s)))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check(C.cosy_engine_get_stats(e.p, &s), "cosy_engine_get_stats"); err != nil {
		return EngineStats{}, err
	}
	return EngineStats{int64(s.weights_bytes), int64(s.kv_bytes), int64(s.workspace_bytes),
		int(s.active), int(s.queued), int64(s.requests_done), int64(s.audio_samples_out)}, nil
}

// Voice is a speaker (immutable; shareable between requests).
type Voice struct {
	p *C.cosy_voice
}

// LoadVoice reads a voice file.
func (e *Engine) LoadVoice(path string) (*Voice, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var v *C.cosy_voice
	if err := check(C.cosy_voice_load(e.p, cpath, &v), "cosy_voice_load"); err != nil {
		return nil, err
	}
	return &Voice{p: v}, nil
}

// Features of a voice: prompt transcript, prompt speech tokens (25 Hz), prompt mel
// ([frames][80] flattened, 50 Hz) and the 192-d speaker embedding.
type Features struct {
	PromptText       string
	SpeechTokens     []int32
	Mel              []float32
	SpeakerEmbedding []float32
}

// cmem copies a slice into C memory (cgo forbids passing Go memory holding Go pointers).
func cmem[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	n := C.size_t(len(s)) * C.size_t(unsafe.Sizeof(s[0]))
	p := C.malloc(n)
	copy(unsafe.Slice((*T)(p), len(s)), s)
	return p
}

// VoiceFromFeatures makes a voice from precomputed features (copied).
func (e *Engine) VoiceFromFeatures(f Features) (*Voice, error) {
	if len(f.Mel)%80 != 0 {
		return nil, fmt.Errorf("cosyvoice: Mel holds %d values, not a multiple of 80", len(f.Mel))
	}
	var c C.cosy_voice_features
	C.cosy_voice_features_init(&c, C.uint32_t(unsafe.Sizeof(c)))
	text := C.CString(f.PromptText)
	tok, mel, spk := cmem(f.SpeechTokens), cmem(f.Mel), cmem(f.SpeakerEmbedding)
	defer func() {
		C.free(unsafe.Pointer(text))
		C.free(tok)
		C.free(mel)
		C.free(spk)
	}()
	c.prompt_text = text
	c.speech_tokens = (*C.int32_t)(tok)
	c.n_speech_tokens = C.int32_t(len(f.SpeechTokens))
	c.mel = (*C.float)(mel)
	c.n_mel_frames = C.int32_t(len(f.Mel) / 80)
	c.speaker_embedding = (*C.float)(spk)
	c.speaker_dim = C.int32_t(len(f.SpeakerEmbedding))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var v *C.cosy_voice
	if err := check(C.cosy_voice_from_features(e.p, &c, &v), "cosy_voice_from_features"); err != nil {
		return nil, err
	}
	return &Voice{p: v}, nil
}

// VoiceFromAudio clones a voice from a recording (cosy_voice_from_audio): mono samples in
// [-1, 1], 0.5 to 30 s at 16 to 192 kHz, and what is said in it (may be empty). The library
// computes the prompt speech tokens, the prompt mel and the speaker embedding; save the result
// with Save to clone once and reuse it.
func (e *Engine) VoiceFromAudio(pcm []float32, sampleRate int, transcript string) (*Voice, error) {
	text := C.CString(transcript)
	buf := cmem(pcm)
	defer func() {
		C.free(unsafe.Pointer(text))
		C.free(buf)
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var v *C.cosy_voice
	st := C.cosy_voice_from_audio(e.p, (*C.float)(buf), C.int64_t(len(pcm)), C.int32_t(sampleRate),
		text, &v)
	if err := check(st, "cosy_voice_from_audio"); err != nil {
		return nil, err
	}
	return &Voice{p: v}, nil
}

// Save writes the voice to a file.
func (v *Voice) Save(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return check(C.cosy_voice_save(v.p, cpath), "cosy_voice_save")
}

// Close releases the voice (requests using it keep it alive until they end).
func (v *Voice) Close() {
	if v.p != nil {
		C.cosy_voice_release(v.p)
		v.p = nil
	}
}

// Params of one synthesis; zero values are the library's defaults.
type Params struct {
	Mode                int
	Seed                uint64 // 0 = from the clock
	SampleRate          int    // 0 = native 24000
	InstructText        string // ModeInstruct only
	Speed               float32
	Temperature         float32
	TopP                float32
	TopK                int
	FirstChunkTokens    int
	MaxTokens           int
	MinTokens           int
	NoTextNormalization bool
}

// cparams fills a cosy_synth_params; free the returned string (may be nil) after the call.
func cparams(p *Params, c *C.cosy_synth_params) *C.char {
	C.cosy_synth_params_init(c, C.uint32_t(unsafe.Sizeof(*c)))
	if p == nil {
		return nil
	}
	c.mode = C.int32_t(p.Mode)
	c.seed = C.uint64_t(p.Seed)
	c.sample_rate = C.int32_t(p.SampleRate)
	c.speed = C.float(p.Speed)
	c.temperature = C.float(p.Temperature)
	c.top_p = C.float(p.TopP)
	c.top_k = C.int32_t(p.TopK)
	c.first_chunk_tokens = C.int32_t(p.FirstChunkTokens)
	c.max_tokens = C.int32_t(p.MaxTokens)
	c.min_tokens = C.int32_t(p.MinTokens)
	if p.NoTextNormalization {
		c.flags |= C.COSY_SYNTH_NO_TEXT_NORMALIZATION
	}
	var instr *C.char
	if p.InstructText != "" {
		instr = C.CString(p.InstructText)
		c.instruct_text = instr
	}
	return instr
}

// Synthesize a whole utterance (blocking).
func (e *Engine) Synthesize(v *Voice, text string, p *Params) ([]float32, error) {
	var cp C.cosy_synth_params
	instr := cparams(p, &cp)
	ctext := C.CString(text)
	defer func() {
		C.free(unsafe.Pointer(ctext))
		C.free(unsafe.Pointer(instr))
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var pcm *C.float
	var n C.int64_t
	if err := check(C.cosy_synthesize(e.p, v.p, ctext, &cp, &pcm, &n), "cosy_synthesize"); err != nil {
		return nil, err
	}
	defer C.cosy_free(unsafe.Pointer(pcm))
	out := make([]float32, int(n))
	copy(out, unsafe.Slice((*float32)(unsafe.Pointer(pcm)), int(n)))
	return out, nil
}

// RequestStats is cosy_request_stats.
type RequestStats struct {
	TTFB, Total, LLM, Flow, Vocoder float64 // seconds
	Samples                         int64
	TextTokens, SpeechTokens        int
	Chunks                          int
	Done                            bool
}

// Stream is one utterance being pulled by a goroutine into C.
type Stream struct {
	// C receives the audio chunk by chunk; it is closed when the utterance ends (or fails, or
	// Close is called).
	C <-chan []float32

	mu       sync.Mutex
	req      *C.cosy_request // nil after Close
	quit     chan struct{}
	done     chan struct{}
	err      error
	quitOnce sync.Once
}

// ChunkSamples is the most samples a Stream sends at once.
const ChunkSamples = 4800

// Stream starts an utterance and returns at once; read its audio from s.C.
func (e *Engine) Stream(v *Voice, text string, p *Params) (*Stream, error) {
	return e.stream(v, &text, p, false)
}

// StreamText starts an utterance whose text is pushed later (COSY_SYNTH_TEXT_STREAM): call
// s.PushText any number of times (e.g. word by word as a chat model produces them), then
// s.EndText, while the audio arrives on s.C. The audio depends only on the text, not on how it
// was cut into pushes.
func (e *Engine) StreamText(v *Voice, p *Params) (*Stream, error) {
	return e.stream(v, nil, p, true)
}

func (e *Engine) stream(v *Voice, text *string, p *Params, textStream bool) (*Stream, error) {
	var cp C.cosy_synth_params
	instr := cparams(p, &cp)
	var ctext *C.char
	if text != nil {
		ctext = C.CString(*text)
	}
	if textStream {
		cp.flags |= C.COSY_SYNTH_TEXT_STREAM
	}
	defer func() {
		C.free(unsafe.Pointer(ctext))
		C.free(unsafe.Pointer(instr))
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r *C.cosy_request
	if err := check(C.cosy_request_submit(e.p, v.p, ctext, &cp, nil, nil, &r),
		"cosy_request_submit"); err != nil {
		return nil, err
	}
	ch := make(chan []float32, 4)
	s := &Stream{C: ch, req: r, quit: make(chan struct{}), done: make(chan struct{})}
	go s.pull(r, ch)
	return s, nil
}

func (s *Stream) pull(r *C.cosy_request, ch chan<- []float32) {
	defer close(s.done)
	defer close(ch) // after s.err is set: a receiver that sees the close may read Err
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		buf := make([]float32, ChunkSamples)
		var n C.int64_t
		// Go memory without Go pointers may be passed to C for the duration of the call.
		st := C.cosy_request_read(r, (*C.float)(unsafe.Pointer(&buf[0])), ChunkSamples, &n, -1)
		if st != C.COSY_OK {
			s.err = check(st, "cosy_request_read")
			return
		}
		if n == 0 {
			return
		}
		select {
		case ch <- buf[:int(n)]:
		case <-s.quit:
			return
		}
	}
}

// PushText appends a piece of the text of a StreamText utterance (cosy_request_push_text).
func (s *Stream) PushText(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.req == nil {
		return fmt.Errorf("cosyvoice: PushText after Close")
	}
	ct := C.CString(text)
	defer C.free(unsafe.Pointer(ct))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return check(C.cosy_request_push_text(s.req, ct), "cosy_request_push_text")
}

// EndText says the text of a StreamText utterance is complete (cosy_request_end_text).
func (s *Stream) EndText() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.req == nil {
		return fmt.Errorf("cosyvoice: EndText after Close")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return check(C.cosy_request_end_text(s.req), "cosy_request_end_text")
}

// TextMark is cosy_text_mark: where the speech for a unit of a StreamText utterance's text (a
// sentence; a word without text normalization) can start. [TextBegin, TextEnd) are UTF-8 byte
// offsets into the concatenation of every piece pushed; Sample is the output sample of the first
// speech token generated after the unit's text entered the LLM, a LOWER BOUND of where it is
// heard (-1 while not fed yet, and for good when the utterance ended first). include/cosyvoice.h
// says exactly what the fields mean.
type TextMark struct {
	TextBegin, TextEnd int64
	Sample             int64
	TextToken          int // index of the unit's first text token among the request's
	SpeechToken        int // Sample's speech token among the spoken ones; -1 with Sample
}

// TextMarks returns the utterance's marks so far (cosy_request_text_marks), one per committed
// unit of its text, in order. Units only get appended and a Sample, once set (>= 0), never
// changes: poll it as the audio plays, from any goroutine (before Close). A voice agent that is
// interrupted at sample n keeps the text of the marks whose Sample is below n (at most that was
// heard) in its conversation history.
func (s *Stream) TextMarks() ([]TextMark, error) { return s.TextMarksFrom(0) }

// TextMarksFrom is TextMarks from index first on (the marks not seen yet, when polling).
func (s *Stream) TextMarksFrom(first int) ([]TextMark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.req == nil {
		return nil, fmt.Errorf("cosyvoice: TextMarks after Close")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var out []TextMark
	var buf [64]C.cosy_text_mark
	for {
		at := first + len(out)
		C.cosy_text_mark_init(&buf[0], C.uint32_t(unsafe.Sizeof(buf[0]))) // buf[0] gives the stride
		var n C.int32_t
		if err := check(C.cosy_request_text_marks(s.req, C.int32_t(at), &buf[0],
			C.int32_t(len(buf)), &n), "cosy_request_text_marks"); err != nil {
			return nil, err
		}
		got := int(n) - at
		if got > len(buf) {
			got = len(buf)
		}
		for i := 0; i < got; i++ {
			m := &buf[i]
			out = append(out, TextMark{int64(m.text_begin), int64(m.text_end), int64(m.sample),
				int(m.text_token), int(m.speech_token)})
		}
		if got < len(buf) { // (also got <= 0: first at or past the end)
			return out, nil
		}
	}
}

// Err tells how the stream ended; call it after C is closed.
func (s *Stream) Err() error {
	<-s.done
	return s.err
}

// Cancel the utterance; any goroutine, any time, idempotent. C is closed soon after, and Err is
// then an *Error with StatusCancelled (unless the utterance had already ended).
func (s *Stream) Cancel() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.req != nil {
		C.cosy_request_cancel(s.req)
	}
}

// Stats of the utterance so far (before Close).
func (s *Stream) Stats() (RequestStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.req == nil {
		return RequestStats{}, fmt.Errorf("cosyvoice: Stats after Close")
	}
	var c C.cosy_request_stats
	C.cosy_request_stats_init(&c, C.uint32_t(unsafe.Sizeof(c)))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check(C.cosy_request_get_stats(s.req, &c), "cosy_request_get_stats"); err != nil {
		return RequestStats{}, err
	}
	return RequestStats{float64(c.ttfb_s), float64(c.total_s), float64(c.llm_s), float64(c.flow_s),
		float64(c.vocoder_s), int64(c.n_samples), int(c.n_text_tokens), int(c.n_speech_tokens),
		int(c.n_chunks), c.done != 0}, nil
}

// Close cancels the utterance if it is still running, stops the goroutine and releases the
// request. Chunks not yet received are dropped. Idempotent.
func (s *Stream) Close() {
	s.Cancel()
	s.quitOnce.Do(func() { close(s.quit) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.req != nil {
		C.cosy_request_release(s.req)
		s.req = nil
	}
}
