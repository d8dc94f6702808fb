# tests/fuzz/fuzz.mk - libFuzzer targets (included by the top-level Makefile; see README.md here).
#
#   make fuzz              build the targets, seed corpora and dictionaries into build/fuzz
#   make fuzz-ci           replay tests/fuzz/regressions/<target>/, then fuzz every target for
#                          FUZZ_TIME seconds (default 60); any crash, sanitizer report or failed
#                          check fails the run and leaves the input in build/fuzz/artifacts/<target>/
#   make fuzz-regress      only the replay of the saved regression inputs
#   make fuzz-run-<target> one target (FUZZ_TIME seconds; FUZZ_ARGS are added to libFuzzer's)
#
# The library is compiled again with clang, -fsanitize=fuzzer-no-link,address,undefined, CPU
# only, into build/fuzz/obj. FUZZ_CC picks the compiler (clang with compiler-rt's libFuzzer).

FUZZ_CC ?= clang
FUZZ_B := build/fuzz
FUZZ_TIME ?= 60
FUZZ_ARGS ?=
FUZZ_TARGETS := gguf model voice wav mel tokenizer text api textstream
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c11 -O2 -g -pthread $(WARN) -Iinclude -Ilib -Itests/fuzz \
               -DCOSY_VERSION_STRING_BUILD='"$(VERSION)"' $(FUZZ_SAN) \
               -DFUZZ_DEFAULT_MODEL='"$(abspath $(DEMO_MODEL))"' \
               -DFUZZ_DEFAULT_VOICE='"$(abspath $(B)/demo/demo-voice.gguf)"'
FUZZ_LIB_SRC := $(wildcard lib/*.c lib/ref/*.c lib/text/*.c)
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_B)/obj/%.o)
FUZZ_LIB := $(FUZZ_B)/libcosyvoice-fuzz.a
FUZZ_BIN := $(FUZZ_TARGETS:%=$(FUZZ_B)/fuzz_%)
# the tokenizer target uses the full Qwen2 vocabulary of the converted golden model when `make
# test` has made it (../shared present), else the demo model's small one
FUZZ_TOK_MODEL = $(if $(wildcard $(TEST_MODEL)),$(abspath $(TEST_MODEL)),$(abspath $(DEMO_MODEL)))
# per target: dictionary, largest input, extra environment
FUZZ_DICT_gguf := gguf
FUZZ_DICT_model := gguf
FUZZ_DICT_voice := gguf
FUZZ_DICT_wav := wav
FUZZ_DICT_mel := wav
FUZZ_DICT_tokenizer := tokenizer
FUZZ_DICT_text := tokenizer
FUZZ_DICT_api := tokenizer
FUZZ_DICT_textstream := textstream
FUZZ_MAXLEN_gguf := 65536
FUZZ_MAXLEN_model := 65536
FUZZ_MAXLEN_voice := 65536
FUZZ_MAXLEN_wav := 16384
FUZZ_MAXLEN_mel := 16384
FUZZ_MAXLEN_tokenizer := 4096
FUZZ_MAXLEN_text := 1024
FUZZ_MAXLEN_api := 512
FUZZ_MAXLEN_textstream := 1024
FUZZ_ENV_tokenizer = COSY_FUZZ_MODEL=$(FUZZ_TOK_MODEL)
FUZZ_STAMP := $(FUZZ_B)/seeds.stamp

.PHONY: fuzz fuzz-ci fuzz-regress $(FUZZ_TARGETS:%=fuzz-run-%) $(FUZZ_TARGETS:%=fuzz-regress-%)

fuzz: $(FUZZ_BIN) $(FUZZ_STAMP)

# The numeric reference code (lib/ref/) gets edge coverage but no comparison tracing: traced
# loop-bound compares there cost most of an engine run and guide nothing.
$(FUZZ_B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link \
	  $(if $(filter lib/ref/%,$<),-fno-sanitize-coverage=trace-cmp) -MMD -MP -c $< -o $@

-include $(FUZZ_LIB_OBJ:.o=.d)

$(FUZZ_LIB): $(FUZZ_LIB_OBJ)
	rm -f $@
	ar rcs $@ $(FUZZ_LIB_OBJ)

$(FUZZ_B)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h tests/fuzz/fuzz_engine.h $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB) -lsamplerate -lm -lpthread

$(FUZZ_STAMP): tests/fuzz/make_seeds.py $(wildcard tests/fuzz/*.dict) $(DEMO_MODEL)
	rm -rf $(FUZZ_B)/seeds $(FUZZ_B)/dict
	$(PYTHON) tests/fuzz/make_seeds.py $(FUZZ_B) $(DEMO_MODEL) $(B)/demo/demo-voice.gguf \
	  --extra-model $(TEST_MODEL) --shared $(SHARED_DIR)
	touch $@

# replay every saved input once (each must run clean, within FUZZ_REGRESS_TIMEOUT seconds: the
# saved slow inputs, tens of kB beyond the fuzzing -max_len, take well under a second each where
# the work is linear and minutes where it turns quadratic again); a target without saved inputs
# is skipped
FUZZ_REGRESS_TIMEOUT ?= 30
fuzz-regress: $(FUZZ_TARGETS:%=fuzz-regress-%)
$(FUZZ_TARGETS:%=fuzz-regress-%): fuzz-regress-%: $(FUZZ_B)/fuzz_% $(DEMO_MODEL)
	@files="$(wildcard tests/fuzz/regressions/$*/*)"; \
	if [ -z "$$files" ]; then echo "fuzz-regress $*: no saved inputs"; exit 0; fi; \
	echo "fuzz-regress $*: $$(echo $$files | wc -w) saved inputs"; \
	$(FUZZ_ENV_$*) ./$(FUZZ_B)/fuzz_$* -rss_limit_mb=4096 -timeout=$(FUZZ_REGRESS_TIMEOUT) $$files \
	  > $(FUZZ_B)/regress-$*.log 2>&1 \
	  || { tail -50 $(FUZZ_B)/regress-$*.log; echo "fuzz-regress $*: FAILED"; exit 1; }

# FUZZ_TIME seconds of fuzzing from the seeds plus the saved inputs; new corpus entries go to
# build/fuzz/corpus/<target> (kept between runs), crashes to build/fuzz/artifacts/<target>/
$(FUZZ_TARGETS:%=fuzz-run-%): fuzz-run-%: $(FUZZ_B)/fuzz_% $(FUZZ_STAMP) fuzz-regress-%
	@mkdir -p $(FUZZ_B)/corpus/$* $(FUZZ_B)/artifacts/$* tests/fuzz/regressions/$*
	@echo "fuzz $*: $(FUZZ_TIME) s"
	@$(FUZZ_ENV_$*) ./$(FUZZ_B)/fuzz_$* -max_total_time=$(FUZZ_TIME) -timeout=30 -seed=$(FUZZ_SEED) \
	  -rss_limit_mb=4096 -max_len=$(FUZZ_MAXLEN_$*) -dict=$(FUZZ_B)/dict/$(FUZZ_DICT_$*).dict \
	  -artifact_prefix=$(FUZZ_B)/artifacts/$*/ -print_final_stats=1 $(FUZZ_ARGS) \
	  $(FUZZ_B)/corpus/$* $(FUZZ_B)/seeds/$* tests/fuzz/regressions/$* \
	  > $(FUZZ_B)/fuzz-$*.log 2>&1 \
	  || { tail -60 $(FUZZ_B)/fuzz-$*.log; echo "fuzz $*: FAILED (input in $(FUZZ_B)/artifacts/$*/)"; exit 1; }
	@grep -E "^#[0-9]+[[:space:]]+DONE" $(FUZZ_B)/fuzz-$*.log | sed 's/^/fuzz $*: /'

# FUZZ_SEED: libFuzzer's seed (0 = random); CI passes a fixed one so its runs repeat
FUZZ_SEED ?= 0

fuzz-ci: $(FUZZ_TARGETS:%=fuzz-run-%)
	@echo "fuzz-ci: $(words $(FUZZ_TARGETS)) targets x $(FUZZ_TIME) s, saved inputs replayed: ok"
