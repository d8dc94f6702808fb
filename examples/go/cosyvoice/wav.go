package cosyvoice

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
)

// ReadWAV reads a RIFF/WAVE file of 16-bit PCM or 32-bit float samples (plain or
// WAVE_FORMAT_EXTENSIBLE) as mono samples in [-1, 1] (channels mixed by their mean) and its
// sample rate. Other encodings are refused with an error naming them.
func ReadWAV(path string) ([]float32, int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return nil, 0, fmt.Errorf("%s: not a RIFF/WAVE file", path)
	}
	var format, channels, bits uint16
	var rate uint32
	var data []byte
	for off := 12; off+8 <= len(b); {
		id, size := string(b[off:off+4]), int(binary.LittleEndian.Uint32(b[off+4:off+8]))
		body := b[off+8:]
		if size > len(body) {
			size = len(body) // a truncated last chunk: take what is there
		}
		body = body[:size]
		switch id {
		case "fmt ":
			if size < 16 {
				return nil, 0, fmt.Errorf("%s: short fmt chunk", path)
			}
			format = binary.LittleEndian.Uint16(body[0:2])
			channels = binary.LittleEndian.Uint16(body[2:4])
			rate = binary.LittleEndian.Uint32(body[4:8])
			bits = binary.LittleEndian.Uint16(body[14:16])
			if format == 0xFFFE && size >= 26 { // extensible: the sub-format's first two bytes
				format = binary.LittleEndian.Uint16(body[24:26])
			}
		case "data":
			data = body
		}
		off += 8 + size + size%2
	}
	if channels == 0 || data == nil {
		return nil, 0, fmt.Errorf("%s: no fmt or data chunk", path)
	}
	var width int
	switch {
	case format == 1 && bits == 16:
		width = 2
	case format == 3 && bits == 32:
		width = 4
	default:
		return nil, 0, fmt.Errorf("%s: format %d with %d-bit samples (this reader takes 16-bit PCM "+
			"or 32-bit float)", path, format, bits)
	}
	frame := width * int(channels)
	out := make([]float32, len(data)/frame)
	for i := range out {
		sum := 0.0
		for c := 0; c < int(channels); c++ {
			p := data[i*frame+c*width:]
			if width == 2 {
				sum += float64(int16(binary.LittleEndian.Uint16(p))) / 32768
			} else {
				sum += float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
			}
		}
		out[i] = float32(sum / float64(channels))
	}
	return out, int(rate), nil
}
