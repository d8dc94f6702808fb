// clone.cpp - a voice from a recording with the C++ wrapper: clone, save, load, say.
//
//   clone MODEL.gguf PROMPT.wav "What the prompt says." VOICE_OUT.gguf ["Text to say."]
//
// 1. read the WAV (16-bit PCM or 32-bit float, channels mixed by their mean; the reader is here,
//    the library takes float samples at any rate from 16 to 192 kHz);
// 2. cosy::voice::from_audio clones it, save() writes the voice file;
// 3. a later run loads that file instead of cloning again: the loaded voice must say exactly what
//    the cloned one says (same seed);
// 4. bad audio (silence) throws cosy::error with COSY_ERR_INVALID_ARG and the library's message.
// Exits non-zero when any of these does not behave as described.
//   c++ -std=c++17 -Wall -Werror clone.cpp $(pkg-config --cflags --libs cosyvoice) -o clone
#include "cosyvoice.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

uint32_t u32(const unsigned char *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint16_t u16(const unsigned char *p) { return uint16_t(p[0] | p[1] << 8); }

// mono samples in [-1, 1] and the rate of a 16-bit PCM or 32-bit float RIFF/WAVE file
std::vector<float> read_wav(const std::string &path, int32_t &rate) {
  std::ifstream f(path, std::ios::binary);
  std::vector<unsigned char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (b.size() < 12 || std::memcmp(b.data(), "RIFF", 4) || std::memcmp(b.data() + 8, "WAVE", 4))
    throw std::runtime_error(path + ": not a RIFF/WAVE file");
  unsigned format = 0, channels = 0, bits = 0;
  const unsigned char *data = nullptr;
  size_t data_len = 0;
  for (size_t off = 12; off + 8 <= b.size();) {
    size_t len = u32(&b[off + 4]);
    len = std::min(len, b.size() - off - 8);  // a truncated last chunk
    const unsigned char *body = &b[off + 8];
    if (!std::memcmp(&b[off], "fmt ", 4) && len >= 16) {
      format = u16(body), channels = u16(body + 2), rate = int32_t(u32(body + 4));
      bits = u16(body + 14);
      if (format == 0xFFFE && len >= 26) format = u16(body + 24);  // extensible
    } else if (!std::memcmp(&b[off], "data", 4)) {
      data = body, data_len = len;
    }
    off += 8 + len + (len & 1);
  }
  const unsigned width = format == 1 && bits == 16 ? 2 : format == 3 && bits == 32 ? 4 : 0;
  if (!data || !channels || !width)
    throw std::runtime_error(path + ": this reader takes 16-bit PCM or 32-bit float");
  std::vector<float> out(data_len / (width * channels));
  for (size_t i = 0; i < out.size(); i++) {
    double sum = 0;
    for (unsigned c = 0; c < channels; c++) {
      const unsigned char *p = data + (i * channels + c) * width;
      if (width == 2) {
        sum += int16_t(u16(p)) / 32768.0;
      } else {
        uint32_t u = u32(p);
        float x;
        std::memcpy(&x, &u, 4);
        sum += x;
      }
    }
    out[i] = float(sum / channels);
  }
  return out;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT.wav \"transcript\" VOICE_OUT.gguf [\"Text\"]\n",
                 argv[0]);
    return 2;
  }
  const std::string text = argc > 5 ? argv[5] : "Hello from a cloned voice.";
  try {
    cosy::engine eng(argv[1]);  // declared first: destroyed last
    int32_t rate = 0;
    std::vector<float> pcm = read_wav(argv[2], rate);
    cosy::voice cloned = cosy::voice::from_audio(eng, pcm, rate, argv[3]);
    cloned.save(argv[4]);
    cosy::voice loaded = cosy::voice::load(eng, argv[4]);
    cosy::synth_params p;
    p.seed = 3;
    p.max_tokens = 60;
    std::vector<float> a = eng.synthesize(cloned, text, p), b = eng.synthesize(loaded, text, p);
    if (a.empty() || a != b) {
      std::fprintf(stderr, "clone: the saved voice says something else (%zu vs %zu samples)\n",
                   a.size(), b.size());
      return 1;
    }
    std::printf("cloned from %.2f s at %d Hz, saved to %s; the loaded voice says the same %zu "
                "samples\n", double(pcm.size()) / rate, int(rate), argv[4], a.size());
    try {
      cosy::voice::from_audio(eng, std::vector<float>(16000, 0.0f), 16000);
      std::fprintf(stderr, "clone: silence was accepted\n");
      return 1;
    } catch (const cosy::error &e) {
      if (e.status() != COSY_ERR_INVALID_ARG) throw;
      std::printf("silence refused: %s\n", e.what());
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "clone: %s\n", e.what());
    return 1;
  }
  return 0;
}
