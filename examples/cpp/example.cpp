// example.cpp - the C++ RAII wrapper (cosyvoice.hpp) in use:
//
//   example MODEL.gguf VOICE.gguf ["Text to say."]
//
// 1. blocking synthesis; 2. the same seed pulled chunk by chunk (must be identical);
// 3. push streaming into a lambda, cancelled from the lambda after its first chunk;
// 4. an error: a missing voice file throws cosy::error with the status and the library's message;
// 5. text streamed in word by word (as a chat model writes it: engine::stream_text, push_text,
//    end_text) with its text marks (request::text_marks: where the speech of each sentence can
//    start, what a voice agent uses to know what was said when it is interrupted); the text in one
//    piece must give the same audio and the same marks, and the marks must be consistent (byte
//    ranges contiguous over the whole text, samples in order, sample = speech_token * 960 at
//    24 kHz).
// Exits non-zero when any of these does not behave as described.
//   c++ -std=c++17 -Wall -Werror example.cpp $(pkg-config --cflags --libs cosyvoice) -o example
#include "cosyvoice.hpp"

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf VOICE.gguf [\"Text to say.\"]\n", argv[0]);
    return 2;
  }
  const std::string text = argc > 3 ? argv[3] : "Hello from C plus plus. Streaming is easy.";
  try {
    cosy::engine eng(argv[1]);  // declared first: destroyed last, after the voice and requests
    cosy::voice voice = cosy::voice::load(eng, argv[2]);

    cosy::synth_params p;
    p.seed = 7;
    p.max_tokens = 100;
    std::vector<float> blocking = eng.synthesize(voice, text, p);
    std::printf("blocking: %zu samples at %d Hz\n", blocking.size(), eng.sample_rate());

    std::vector<float> pulled;
    {
      cosy::request r = eng.submit(voice, text, p);
      int chunks = 0;
      for (std::vector<float> c; !(c = r.read(4800)).empty(); chunks++)
        pulled.insert(pulled.end(), c.begin(), c.end());
      cosy_request_stats s = r.stats();
      std::printf("pulled:   %zu samples in %d reads, ttfb %.3f s, %d speech tokens\n",
                  pulled.size(), chunks, s.ttfb_s, s.n_speech_tokens);
    }
    if (pulled != blocking) {
      std::fprintf(stderr, "pulled audio differs from blocking audio\n");
      return 1;
    }

    std::mutex mu;
    int pushed_chunks = 0;
    {
      cosy::request r = eng.submit(voice, text, p, [&](const cosy_chunk &c) {
        std::lock_guard<std::mutex> lock(mu);  // engine thread
        pushed_chunks++;
        std::printf("pushed chunk at offset %lld: %lld samples; cancelling\n",
                    static_cast<long long>(c.offset), static_cast<long long>(c.n_samples));
        return false;  // cancel after the first chunk
      });
      try {
        r.wait();
        std::fprintf(stderr, "the request was not cancelled\n");
        return 1;
      } catch (const cosy::error &e) {
        if (e.status() != COSY_ERR_CANCELLED) throw;
        std::printf("cancelled as asked: %s\n", e.what());
      }
    }
    if (pushed_chunks != 1) {
      std::fprintf(stderr, "expected 1 pushed chunk, got %d\n", pushed_chunks);
      return 1;
    }

    try {
      cosy::voice missing = cosy::voice::load(eng, "/nonexistent/voice.gguf");
      std::fprintf(stderr, "loading a missing voice did not throw\n");
      return 1;
    } catch (const cosy::error &e) {
      std::printf("error as expected (status %d): %s\n", e.status(), e.what());
      if (e.status() != COSY_ERR_IO) return 1;
    }

    // 5. text streamed in, and what was said where: a longer text, so that the later sentences
    //    enter the LLM after speech has begun (the first ones go in with the voice's prompt,
    //    before any speech: their marks are 0)
    const std::string reply = text + " This reply goes on for a few more sentences. Each of them"
                                     " gets a mark of its own. The later ones start later.";
    cosy::synth_params q = p;
    q.max_tokens = 250;
    auto text_stream = [&](bool by_word, std::vector<cosy::text_mark> &marks) {
      cosy::request r = eng.stream_text(voice, q);
      if (by_word) {  // "Hello", " from", " C", ...: each word with the space before it
        for (size_t i = 0; i < reply.size();) {
          size_t j = reply.find(' ', i + 1);
          if (j == std::string::npos) j = reply.size();
          r.push_text(reply.substr(i, j - i));
          i = j;
        }
      } else {
        r.push_text(reply);
      }
      r.end_text();
      std::vector<float> pcm;
      for (std::vector<float> c; !(c = r.read(4800)).empty();) pcm.insert(pcm.end(), c.begin(), c.end());
      marks = r.text_marks();  // complete once the audio has ended
      return pcm;
    };
    std::vector<cosy::text_mark> marks, marks1;
    std::vector<float> by_word = text_stream(true, marks);
    std::vector<float> one_piece = text_stream(false, marks1);
    std::printf("text streamed word by word: %zu samples, %zu marks\n", by_word.size(), marks.size());
    const int64_t rate = eng.sample_rate();
    bool ended = false;  // a unit that never entered the LLM (sample -1): so do all after it
    for (size_t i = 0; i < marks.size(); i++) {
      const cosy::text_mark &m = marks[i];
      std::printf("  bytes [%lld, %lld) \"%s\": can be heard from sample %lld (%.2f s)\n",
                  static_cast<long long>(m.text_begin), static_cast<long long>(m.text_end),
                  reply.substr(static_cast<size_t>(m.text_begin),
                              static_cast<size_t>(m.text_end - m.text_begin)).c_str(),
                  static_cast<long long>(m.sample), static_cast<double>(m.sample) / rate);
      const bool ok =
          m.text_begin == (i ? marks[i - 1].text_end : 0) && m.text_end > m.text_begin &&
          (m.sample < 0 ? m.sample == -1 && m.speech_token == -1
                        : !ended && m.sample <= static_cast<int64_t>(by_word.size()) &&
                              (i == 0 || m.sample >= marks[i - 1].sample) &&
                              m.sample == m.speech_token * 960 * rate / 24000);
      if (!ok) {
        std::fprintf(stderr, "mark %zu is not consistent with the others and the audio\n", i);
        return 1;
      }
      ended = ended || m.sample < 0;
    }
    if (marks.empty() || marks.back().text_end != static_cast<int64_t>(reply.size())) {
      std::fprintf(stderr, "the marks do not cover the reply's %zu bytes\n", reply.size());
      return 1;
    }
    bool same_marks = marks.size() == marks1.size();
    for (size_t i = 0; same_marks && i < marks.size(); i++)
      same_marks = marks[i].text_begin == marks1[i].text_begin &&
                   marks[i].text_end == marks1[i].text_end && marks[i].sample == marks1[i].sample &&
                   marks[i].text_token == marks1[i].text_token &&
                   marks[i].speech_token == marks1[i].speech_token;
    if (by_word != one_piece || !same_marks) {
      std::fprintf(stderr, "the text pushed word by word and in one piece differ (%s)\n",
                   same_marks ? "audio" : "marks");
      return 1;
    }
    std::printf("ok\n");
  } catch (const cosy::error &e) {
    std::fprintf(stderr, "cosy::error %d: %s\n", e.status(), e.what());
    return 1;
  }
  return 0;
}
