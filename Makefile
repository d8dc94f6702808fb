# libcosyvoice - top-level Makefile (GNU make). No CMake.
#
#   make                 library (shared + static), CLI, tests, benchmarks
#   make test            build and run the test suite (GPU tests skip without a GPU)
#   make test-sanitize   the test suite built with AddressSanitizer + UBSan (CPU only, in build/asan),
#                        including the allocation fault injection of tests/test_fault.c
#   make test-fault      only that fault injection (the ASan build)
#   make test-c          only the C test binaries (TEST_ONLY=, TEST_SKIP=; TEST_JOBS=N runs N at a
#                        time, as the sanitizer stages do with SAN_TEST_JOBS, default 2)
#   make test-tsan       the test suite (all but test_model) under ThreadSanitizer (CPU, build/tsan)
#   make fuzz / fuzz-ci  libFuzzer targets (clang) / a bounded run of each (tests/fuzz/README.md)
#   make bench           build the benchmarks
#   make install         PREFIX=/usr/local DESTDIR= : header, libraries, cosyvoice.pc, CLI
#   make check-abi       exported symbols == abi/cosyvoice.symbols
#   make check-citations comments and docs cite only the repository (tools/check_citations.sh)
#   make check-bench     every raw benchmark log cited, every citation found (tools/check_bench.sh)
#   make check-knobs     no getenv in lib/ or kernels/ but lib/knobs.c, every knob in docs/knobs.md
#   make check-layers    no two files of lib/ call each other in a circle (tools/check_layers.sh,
#                        over the symbols of the built objects; docs/architecture.md)
#   make demo            make a demo model (random weights, own tokenizer) and say something
#   make test-readme     the README's commands run or checked (tests/test_readme.py; part of make test)
#   make test-examples   the C, C++, Python, Go and Rust examples against an installed copy
#   make test-python     the cosyvoice Python package, its speech server and the Triton model
#                        (pytest in the virtual environment `tools/setup.sh --venv` makes: VENV=build/venv),
#                        after typecheck-python (mypy on the package's annotations)
#   make clean
#
# CUDA=1 builds the kernels (default when nvcc is found); CUDA=0 gives a CPU-only library.
# OPENMP=1 parallelizes the CPU reference path over cores (cosy_engine_config.cpu_threads).

# Every command below runs under the C locale, whatever LANG / LC_* the caller has (also over
# `make LC_ALL=...`): `sort` and `diff` order and compare bytes (abi/cosyvoice.symbols is in C
# order), numbers print with '.', messages are untranslated. tests/check_env.sh checks it.
override LC_ALL := C
export LC_ALL

VERSION_MAJOR := 0
VERSION_MINOR := 1
VERSION_PATCH := 0
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR ?=

B ?= build
SAN ?= 0
PYTHON ?= python3
SHARED_DIR ?= ../shared
# the installed wetext wheel's grammar directory (test_text reads it; empty when not installed)
WETEXT_FSTS ?= $(shell $(PYTHON) -c "import importlib.util as u, os; s = u.find_spec('wetext'); \
  print(os.path.join(os.path.dirname(s.origin), 'fsts') if s and s.origin else '')" 2>/dev/null)

NVCC ?= $(shell command -v nvcc 2>/dev/null)
# ---- the build's configuration, kept per build folder ------------------------------------------
# The first `make` in a build folder chooses CUDA and CUDA_ARCHS and writes them to $(B)/config.mk;
# later calls in that folder read them back, so `make test` builds what `make demo` chose. CUDA=
# or CUDA_ARCHS= given on the command line (or in the environment) win and are written back.
# The first choice, when neither is given:
#   nvcc on PATH and a GPU (nvidia-smi lists one)   CUDA=1 CUDA_ARCHS=native: kernels for these GPUs
#   otherwise                                       CUDA=0: the CPU library (one line says how to
#                                                   build the kernels anyway)
# CUDA=1 alone builds for the GPUs present (native), or for every target (all) where there is
# none; CUDA_ARCHS=all is the full target list (CI and the Python package build ask for it).
CONFIG_MK := $(B)/config.mk
CONFIG_CUDA :=
CONFIG_CUDA_ARCHS :=
-include $(CONFIG_MK)
given = $(filter command line environment override,$(origin $(1)))
# compute capabilities of this machine's GPUs, without dots ("90"); empty without a GPU
gpu_caps = $(sort $(subst .,,$(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader \
             2>/dev/null | grep -E '^[0-9]+\.[0-9]+$$')))
CONFIG_NOTE :=
ifneq ($(call given,CUDA),)
else ifneq ($(and $(call given,CUDA_ARCHS),$(strip $(CUDA_ARCHS))),)
  CUDA := $(if $(NVCC),1,0)
else ifneq ($(CONFIG_CUDA),)
  CUDA := $(CONFIG_CUDA)
else ifeq ($(NVCC),)
  CUDA := 0
else
  GPU_CAPS := $(gpu_caps)
  CUDA := $(if $(GPU_CAPS),1,0)
  ifeq ($(CUDA),0)
    CONFIG_NOTE := no GPU found (nvidia-smi): building the CPU library; kernels anyway: \
      `make CUDA=1` (every GPU target, about 10 minutes on 2 cores) or `make CUDA_ARCHS=90` (one)
  endif
endif
ifneq ($(filter 1 thread,$(SAN)),)
  CUDA := 0
endif
ifneq ($(and $(call given,CUDA_ARCHS),$(strip $(CUDA_ARCHS))),)
else ifneq ($(strip $(CONFIG_CUDA_ARCHS)),)
  CUDA_ARCHS := $(CONFIG_CUDA_ARCHS)
else ifeq ($(CUDA),1)
  GPU_CAPS ?= $(gpu_caps)
  CUDA_ARCHS := $(if $(GPU_CAPS),native,all)
  CONFIG_NOTE := $(if $(GPU_CAPS),GPU sm_$(GPU_CAPS) found: kernels for this GPU only \
    (CUDA_ARCHS=native); `make CUDA_ARCHS=all` builds every target,building kernels for every \
    GPU target (CUDA_ARCHS=all))
else
  CUDA_ARCHS :=
endif
# the configuration file changes only when the choice does (it is no prerequisite of anything)
CONFIG_TEXT := CONFIG_CUDA := $(CUDA)|CONFIG_CUDA_ARCHS := $(strip $(CUDA_ARCHS))
ifneq ($(CONFIG_TEXT),CONFIG_CUDA := $(CONFIG_CUDA)|CONFIG_CUDA_ARCHS := $(strip $(CONFIG_CUDA_ARCHS)))
  $(shell mkdir -p $(B) && printf '%s\n' '# written by the Makefile: the build configuration of this folder' \
    '# (`make CUDA=... CUDA_ARCHS=...` changes it; deleting this file chooses again)' \
    $(foreach l,$(subst |, ,$(subst $() ,^,$(CONFIG_TEXT))),'$(subst ^, ,$(l))') > $(CONFIG_MK))
  ifneq ($(CONFIG_NOTE),)
    $(info libcosyvoice: $(strip $(CONFIG_NOTE)) (kept in $(CONFIG_MK)))
  endif
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

CC ?= cc
CXX ?= c++
OPT ?= -O2
WARN := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS_ALL := -std=c11 $(OPT) -g -fPIC -fvisibility=hidden -pthread $(WARN) -Iinclude -Ilib \
              -Ikernels -DCOSY_VERSION_STRING_BUILD='"$(VERSION)"' $(CFLAGS)
LDLIBS_ALL := -lsamplerate -lm -lpthread $(LDLIBS)
OPENMP ?= 0
ifeq ($(OPENMP),1)
  CFLAGS_ALL += -fopenmp
  LDLIBS_ALL += -fopenmp
endif
# COSY_SANITIZE: the CPU reference's innermost loops check their footprint once per call instead
# of at every access (lib/hot.h)
ifeq ($(SAN),1)
  CFLAGS_ALL += -fsanitize=address,undefined -fno-omit-frame-pointer \
                -fno-sanitize-recover=undefined -DCOSY_SANITIZE=1
  LDFLAGS += -fsanitize=address,undefined
endif
# FAULT=1: host allocations can be made to fail at the n-th call (lib/util.h, tests/test_fault.c);
# on in the AddressSanitizer build, off elsewhere
FAULT ?= $(if $(filter 1,$(SAN)),1,0)
ifeq ($(FAULT),1)
  CFLAGS_ALL += -DCOSY_FAULT_INJECTION=1
endif
ifeq ($(SAN),thread)
  CFLAGS_ALL += -fsanitize=thread -fno-omit-frame-pointer -DCOSY_SANITIZE=1
  LDFLAGS += -fsanitize=thread
endif

# GPU targets. CUDA_ARCHS (on the command line; kept in $(B)/config.mk, above):
#   all            machine code for each of CUDA_ARCH_LIST (compute capabilities, ascending) that
#                  this nvcc can build (`nvcc --list-gpu-code`; the others are left out with a
#                  warning), plus PTX of the newest one's level (CUDA_PTX_LEVELS), which newer
#                  GPUs compile at load
#   native         the GPUs of this machine (nvidia-smi's compute_cap) plus their PTX: quick local
#                  builds; the library then serves only those GPUs
#   "86 90"        this list of compute capabilities (machine code each, PTX of the last one's level;
#                  "sm_86 sm_90" means the same)
#   "-gencode ..." nvcc flags as given (cosy_version_string then names the code= targets)
# The targets go into cosy_version_string(); changing them rebuilds the kernels.
CUDA_ARCH_LIST ?= 80 86 89 90 100 120
# The compute capabilities at which the kernels' code changes: the values their `__CUDA_ARCH__ >=`
# tests name (tools/check_kernel_registry.sh checks that they name no other). A target's machine
# code is made from the PTX of the highest of these at or below it (sm_86 and sm_89 from
# compute_80, sm_100 and sm_120 from compute_90: the same source text as their own PTX would
# give), so nvcc's front end, most of a kernel file's compile time, runs once per level rather
# than once per target; ptxas still optimizes for each target. The PTX shipped for newer GPUs is
# the newest target's level (compute_90 for `all`).
CUDA_PTX_LEVELS := 80 90
CUDA_ARCHS ?=
comma := ,
ifeq ($(CUDA),1)
  NVCC_CODES := $(shell $(NVCC) --list-gpu-code 2>/dev/null)
  ifeq ($(strip $(CUDA_ARCHS)),all)
    ifeq ($(NVCC_CODES),)
      CUDA_ARCH_NUMS := $(CUDA_ARCH_LIST)
    else
      CUDA_ARCH_NUMS := $(foreach a,$(CUDA_ARCH_LIST),$(if $(filter sm_$(a),$(NVCC_CODES)),$(a)))
      CUDA_ARCH_MISSING := $(filter-out $(CUDA_ARCH_NUMS),$(CUDA_ARCH_LIST))
      ifneq ($(CUDA_ARCH_MISSING),)
        $(warning $(NVCC) cannot build $(CUDA_ARCH_MISSING:%=sm_%): left out; such a GPU runs the PTX of the newest target when that is older than the GPU, else not at all)
      endif
      ifeq ($(CUDA_ARCH_NUMS),)
        $(error $(NVCC) builds none of $(CUDA_ARCH_LIST:%=sm_%) (it lists $(NVCC_CODES)); CUDA 12.8 or newer is needed, or set CUDA_ARCHS)
      endif
    endif
  else ifeq ($(strip $(CUDA_ARCHS)),native)
    CUDA_ARCH_NUMS := $(gpu_caps)
    ifeq ($(CUDA_ARCH_NUMS),)
      $(error CUDA_ARCHS=native: nvidia-smi reports no GPU on this machine)
    endif
  else ifeq ($(filter -%,$(CUDA_ARCHS)),)
    CUDA_ARCH_NUMS := $(patsubst sm_%,%,$(CUDA_ARCHS))
  endif
  ifneq ($(CUDA_ARCH_NUMS),)
    # each target's machine code from the PTX of its level (CUDA_PTX_LEVELS, above): "lvl:target"
    CUDA_PTX_PAIRS := $(shell for a in $(CUDA_ARCH_NUMS); do p=$$a; for v in $(CUDA_PTX_LEVELS); do \
                        [ "$$a" -ge "$$v" ] && p=$$v; done; echo "$$p:$$a"; done)
    CUDA_PTX_LAST := $(firstword $(subst :, ,$(lastword $(CUDA_PTX_PAIRS))))
    CUDA_GENCODE := $(foreach x,$(CUDA_PTX_PAIRS),-gencode arch=compute_$(subst :,$(comma)code=sm_,$(x))) \
                    -gencode arch=compute_$(CUDA_PTX_LAST),code=compute_$(CUDA_PTX_LAST)
    CUDA_ARCH_WORDS := $(CUDA_ARCH_NUMS:%=sm_%) compute_$(CUDA_PTX_LAST)
  else
    CUDA_GENCODE := $(CUDA_ARCHS)
    CUDA_ARCH_WORDS := $(or $(patsubst code=%,%,$(filter code=%,$(subst $(comma), ,$(CUDA_ARCHS)))),\
                         $(CUDA_ARCHS))
  endif
  # the targets as built: a stamp that changes with them (the kernels and version.c depend on it)
  CUDA_STAMP := $(B)/obj/cuda-targets.txt
  $(shell mkdir -p $(B)/obj && { echo '$(CUDA_GENCODE)' | cmp -s - $(CUDA_STAMP) || \
    echo '$(CUDA_GENCODE)' > $(CUDA_STAMP); })
endif
NVCCFLAGS_ALL := -O3 -std=c++17 $(CUDA_GENCODE) -Xcompiler -fPIC,-fvisibility=hidden -Iinclude -Ilib \
                 -Ikernels --expt-relaxed-constexpr $(NVCCFLAGS)
ifeq ($(CUDA),1)
  CFLAGS_ALL += -DCOSY_WITH_CUDA=1 -I$(CUDA_HOME)/include
  CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib))
  LDLIBS_ALL += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublasLt -lcublas -lcudart -lstdc++
  NVCC_RELEASE := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  CUDA_MAJOR := $(firstword $(subst ., ,$(NVCC_RELEASE)))
endif
# CUDA=0/1 as built: every C object depends on it, so that switching rebuilds them
MODE_STAMP := $(B)/obj/cuda-mode.txt
$(shell mkdir -p $(B)/obj && { echo '$(CUDA)' | cmp -s - $(MODE_STAMP) || echo '$(CUDA)' > $(MODE_STAMP); })

# compile steps print "[cc 3/95] lib/api.c" / "[nvcc 3/19] kernels/gemv.cu" (numbered in the
# library's source list); V=1 prints the commands instead
V ?= 0
Q := $(if $(filter 1,$(V)),,@)
# `make -s` prints neither
PROGRESS = $(if $(Q),$(if $(findstring s,$(firstword -$(MAKEFLAGS))),,@echo "$(1)"))

# lib/backend_cpu.c and lib/backend_gpu.c are built in every configuration (backend_gpu.c is a
# stub that refuses device >= 0 without CUDA); the GPU stages of lib/gpu/ only with CUDA=1
LIB_SRC := $(wildcard lib/*.c lib/ref/*.c lib/text/*.c)
ifeq ($(CUDA),1)
  LIB_SRC += $(wildcard lib/gpu/*.c)
  CU_SRC := $(wildcard kernels/*.cu)
endif
LIB_OBJ := $(LIB_SRC:%.c=$(B)/obj/%.o) $(CU_SRC:%.cu=$(B)/obj/%.o)
SRC_SEEN :=
$(foreach f,$(LIB_SRC),$(eval SRC_SEEN += x)$(eval SRC_NUM_$(f) := $(words $(SRC_SEEN))/$(words $(LIB_SRC))))
SRC_SEEN :=
$(foreach f,$(CU_SRC),$(eval SRC_SEEN += x)$(eval SRC_NUM_$(f) := $(words $(SRC_SEEN))/$(words $(CU_SRC))))

SONAME := libcosyvoice.so.$(VERSION_MAJOR)
SO := $(B)/lib/libcosyvoice.so.$(VERSION)
A := $(B)/lib/libcosyvoice.a

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)
# bench/kernel_time.c is a preload library with no main (bench/device_run.sh builds it, step gputime);
# bench/bench_kernels.c is the --bench half of build/tests/test_kernels (the kernel harness)
BENCH_SRC := $(filter-out bench/kernel_time.c bench/bench_kernels.c,$(wildcard bench/*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(B)/bench/%)
# bench/*.cu: standalone CUDA measurements (bench/launch_cost.cu, bench/gemv_stream.cu), no library;
# built for sm_90 where CUDA is (so that they compile in CI), run by hand on a GPU
ifeq ($(CUDA),1)
BENCH_CU_BIN := $(patsubst bench/%.cu,$(B)/bench/%,$(wildcard bench/*.cu))
endif
CLI := $(B)/bin/cosyvoice-say

.PHONY: all lib test test-c test-py test-bench test-env test-sanitize test-tsan test-fault bench install uninstall \
        check-abi check-header check-citations check-bench check-kernels check-layers demo clean
.DELETE_ON_ERROR:

all: lib $(CLI) $(TEST_BIN) $(BENCH_BIN) $(BENCH_CU_BIN)
lib: $(SO) $(A)

$(B)/obj/%.o: %.c $(MODE_STAMP)
	@mkdir -p $(dir $@)
	$(call PROGRESS,[cc$(SRC_NUM_$<:%= %)] $<)
	$(Q)$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(B)/obj/%.o: %.cu $(CUDA_STAMP)
	@mkdir -p $(dir $@)
	$(call PROGRESS,[nvcc$(SRC_NUM_$<:%= %)] $< ($(CUDA_ARCH_WORDS)))
	$(Q)$(NVCC) $(NVCCFLAGS_ALL) -MMD -MP -c $< -o $@

-include $(LIB_OBJ:.o=.d)

ifeq ($(CUDA),1)
$(B)/obj/lib/version.o: CFLAGS_ALL += -DCOSY_CUDA_BUILD='"cuda $(NVCC_RELEASE), $(CUDA_ARCH_WORDS)"'
$(B)/obj/lib/version.o: $(CUDA_STAMP)
endif

$(SO): $(LIB_OBJ) lib/cosyvoice.map
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(LIB_OBJ) -Wl,-soname,$(SONAME) -Wl,--version-script=lib/cosyvoice.map \
	  -Wl,--no-undefined $(LDFLAGS) $(LDLIBS_ALL)
	ln -sf libcosyvoice.so.$(VERSION) $(B)/lib/$(SONAME)
	ln -sf $(SONAME) $(B)/lib/libcosyvoice.so

$(A): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $(LIB_OBJ)

# the CLI and tests link the static library (tests reach internal functions)
$(CLI): examples/cli/cosyvoice-say.c $(A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(A) $(LDFLAGS) $(LDLIBS_ALL)

# the test binaries find the reference data and the test model from any current directory
$(B)/obj/tests/testutil.o: tests/testutil.c tests/testutil.h $(MODE_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -DTU_SHARED_DEFAULT='"$(abspath $(SHARED_DIR))"' \
	  -DTU_TEST_MODEL_DEFAULT='"$(abspath $(TEST_MODEL))"' \
	  -DTU_FE_MODEL_DEFAULT='"$(abspath $(FE_TEST_MODEL))"' -DTU_FE_DATA_DEFAULT='"$(abspath $(FE_DATA))"' \
	  -DTU_TESTS_DIR='"$(abspath tests)"' \
	  -c $< -o $@

$(B)/tests/%: tests/%.c $(B)/obj/tests/testutil.o $(A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(B)/obj/tests/testutil.o $(A) $(LDFLAGS) -lcmocka $(LDLIBS_ALL)

# the kernel harness (tests/kharness.h): the tests, the benchmark (--bench) and the registry in one
# program; the kernels' objects come from the static library
KH_OBJ := $(B)/obj/tests/kharness.o $(B)/obj/tests/kregistry.o $(B)/obj/bench/bench_kernels.o
$(KH_OBJ): CFLAGS_ALL += -Itests
-include $(KH_OBJ:.o=.d)
$(B)/tests/test_kernels: tests/test_kernels.c $(KH_OBJ) $(B)/obj/tests/testutil.o $(A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(KH_OBJ) $(B)/obj/tests/testutil.o $(A) $(LDFLAGS) -lcmocka \
	  $(LDLIBS_ALL)

$(B)/bench/%: bench/%.c $(A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(A) $(LDFLAGS) $(LDLIBS_ALL)

$(B)/bench/%: bench/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -arch=sm_90 -o $@ $<

# ---- the library of the Python package (python/setup.py builds it: make pylib) -----------------
# The same objects as $(SO), linked without the build machine's CUDA directory as RPATH: in a
# wheel the CUDA runtime and cuBLAS come from NVIDIA's pip wheels (site-packages/nvidia/...: the
# RPATH entries below, relative to site-packages/cosyvoice/lib; python/cosyvoice/_capi.py also
# loads them from there first) or from the system. build-info.json tells the package how it was
# built.
PYLIB_DIR := $(B)/python
PYLIB := $(PYLIB_DIR)/$(SONAME)
PYLIB_RPATH := $(if $(filter 1,$(CUDA)),-Wl$(comma)-rpath$(comma)'$$ORIGIN/../../nvidia/cu$(CUDA_MAJOR)/lib:$$ORIGIN/../../nvidia/cublas/lib:$$ORIGIN/../../nvidia/cuda_runtime/lib')
.PHONY: pylib
pylib: $(PYLIB) $(PYLIB_DIR)/build-info.json
$(PYLIB): $(LIB_OBJ) lib/cosyvoice.map
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(LIB_OBJ) -Wl,-soname,$(SONAME) -Wl,--version-script=lib/cosyvoice.map \
	  -Wl,--no-undefined $(LDFLAGS) $(filter-out -Wl$(comma)-rpath$(comma)%,$(LDLIBS_ALL)) $(PYLIB_RPATH)
# (cuda_libs: the CUDA libraries the library needs, as the linker kept them)
$(PYLIB_DIR)/build-info.json: $(PYLIB) $(MODE_STAMP) $(CUDA_STAMP) Makefile
	@libs=$$(objdump -p $(PYLIB) | awk '$$1 == "NEEDED" && $$2 ~ /^libcu/ \
	  { printf "%s\"%s\"", s, $$2; s = ", " }'); \
	printf '{"version": "%s", "cuda": %s, "cuda_major": "%s", "cuda_release": "%s", "targets": "%s", "cuda_libs": [%s]}\n' \
	  '$(VERSION)' '$(CUDA)' '$(CUDA_MAJOR)' '$(NVCC_RELEASE)' '$(strip $(CUDA_ARCH_WORDS))' "$$libs" > $@
	@echo "$@: $$(cat $@)"

# ---- test models ------------------------------------------------------------------------------
# The small golden checkpoint (../shared/golden/small) converted with the project's converter
# (python/cosyvoice/convert; tools/convert.py runs it from the checkout).
CONVERT_PY := $(wildcard python/cosyvoice/convert/*.py)
TEST_MODEL := $(B)/test/small-f32.gguf
$(TEST_MODEL): tools/convert.py $(CONVERT_PY)
	@mkdir -p $(dir $@)
	@if [ -d $(SHARED_DIR)/golden/small ]; then \
	  $(PYTHON) tools/convert.py $(SHARED_DIR)/golden/small -o $@ --dtype f32 \
	    --tokenizer $(SHARED_DIR)/tokenizer --added-tokens $(SHARED_DIR)/tokenizer/added_tokens.json; \
	else echo "note: $(SHARED_DIR)/golden/small not found: golden tests will skip"; fi

# The same plus the small random front-end models of tests/data/frontend (state dicts: numpy only).
FE_DATA := tests/data/frontend
FE_TEST_MODEL := $(B)/test/small-fe-f32.gguf
$(FE_TEST_MODEL): tools/convert.py $(CONVERT_PY) $(FE_DATA)/s3tok_small.pt $(FE_DATA)/campplus_small.pt
	@mkdir -p $(dir $@)
	@if [ -d $(SHARED_DIR)/golden/small ]; then \
	  $(PYTHON) tools/convert.py $(SHARED_DIR)/golden/small -o $@ --dtype f32 \
	    --tokenizer $(SHARED_DIR)/tokenizer --added-tokens $(SHARED_DIR)/tokenizer/added_tokens.json \
	    --speech-tokenizer $(FE_DATA)/s3tok_small.pt --campplus $(FE_DATA)/campplus_small.pt; \
	else echo "note: $(SHARED_DIR)/golden/small not found: front-end model tests will skip"; fi

# ---- tests --------------------------------------------------------------------------------------
test: all $(TEST_MODEL) $(FE_TEST_MODEL) check-header check-abi check-citations check-bench check-kernels check-layers test-env \
      test-c test-py test-bench

# TEST_ONLY=test_a test_b: run only these test binaries; TEST_SKIP=test_c: all but these
TEST_RUN := $(if $(TEST_ONLY),$(TEST_ONLY:%=$(B)/tests/%),\
              $(filter-out $(TEST_SKIP:%=$(B)/tests/%),$(TEST_BIN)))
# TEST_JOBS=N: N test binaries at a time, each one's output printed whole when it ends
# (tests/run_tests.sh; the sanitizer stages use SAN_TEST_JOBS); 1: one after another
TEST_JOBS ?= 1
SAN_TEST_JOBS ?= 2
# with several at a time the slowest binaries start first (the sanitizer builds' longest, in
# order), so that no long one starts last beside an idle core
TEST_SLOW := test_textstream test_synth test_fault test_voice_audio test_longtext test_ref_hift test_stress
TEST_ORDER := $(if $(filter-out 1,$(TEST_JOBS)),$(foreach t,$(TEST_SLOW),$(filter %/$(t),$(TEST_RUN))) \
                $(filter-out $(addprefix %/,$(TEST_SLOW)),$(TEST_RUN)),$(TEST_RUN))
test-c: $(TEST_RUN) $(TEST_MODEL) $(FE_TEST_MODEL)
	@COSY_SHARED=$(SHARED_DIR) COSY_TEST_MODEL=$(TEST_MODEL) COSY_WETEXT_FSTS=$(WETEXT_FSTS) \
	  COSY_TEST_FE_MODEL=$(FE_TEST_MODEL) bash tests/run_tests.sh $(TEST_JOBS) $(B)/test-logs $(TEST_ORDER)

test-py: $(TEST_MODEL) $(FE_TEST_MODEL) $(CLI)
	COSY_SHARED=$(SHARED_DIR) COSY_TEST_MODEL=$(TEST_MODEL) $(PYTHON) tests/test_tools.py
	COSY_CLI=$(CLI) COSY_TEST_FE_MODEL=$(FE_TEST_MODEL) $(PYTHON) tests/test_cli.py

# bench_w1 with a list of devices: two CPU engines on the small model (a few seconds); W3 (live
# users, bench_w1 --users) with 2 users and a 3 s level on the CPU (about 10 s); W4 (text streamed
# in, bench_w1 --text-stream) in process and through the server's WebSocket with the audio
# compared (bench/serve_ws.py; the WebSocket part in the venv of test-python, skipped without it;
# about 30 s)
test-bench: $(B)/bench/bench_w1 $(TEST_MODEL) $(SO)
	B=$(B) TEST_MODEL=$(TEST_MODEL) PYTHON=$(PYTHON) bash tests/check_bench_multi.sh
	B=$(B) TEST_MODEL=$(TEST_MODEL) PYTHON=$(PYTHON) bash tests/check_bench_w3.sh
	B=$(B) TEST_MODEL=$(TEST_MODEL) PYTHON=$(PYTHON) bash tests/check_trace_summary.sh
	B=$(B) TEST_MODEL=$(TEST_MODEL) PYTHON=$(PYTHON) SERVER_PY=$(VENV_PY) bash tests/check_bench_ws.sh

# check-abi under another locale, test binaries run from another directory (tests/check_env.sh)
test-env: check-abi $(TEST_BIN) $(TEST_MODEL) $(FE_TEST_MODEL)
	@MAKE="$(MAKE)" B=$(B) CUDA=$(CUDA) SHARED_DIR=$(SHARED_DIR) TEST_MODEL=$(TEST_MODEL) \
	  bash tests/check_env.sh

# the README's commands against what works (tests/test_readme.py: the demo command run as written
# in this build folder, the converter and cosyvoice-say commands run on test models, every other
# command's target, extra and options checked); the test venv, when there, checks
# cosyvoice-server's options
.PHONY: test-readme
test: test-readme
test-readme: $(SO) $(CLI) $(DEMO_MODEL)
	B=$(B) PYTHON=$(PYTHON) COSY_SHARED=$(SHARED_DIR) \
	  COSY_README_PYTHON=$(if $(wildcard $(VENV_PY)),$(VENV_PY)) $(PYTHON) tests/test_readme.py

# the first build's choice of CUDA / CUDA_ARCHS and $(B)/config.mk (make -n in temporary
# folders); part of make test
.PHONY: check-build-config
test: check-build-config
check-build-config:
	@MAKE="$(MAKE)" bash tests/check_build_config.sh

test-sanitize:
	$(MAKE) B=build/asan SAN=1 CUDA=0 TEST_JOBS=$(SAN_TEST_JOBS) test-c

# host allocation failures injected at every allocation site (tests/test_fault.c) in the
# AddressSanitizer build, where LeakSanitizer checks every failure path; test-sanitize runs it too
test-fault:
	$(MAKE) B=build/asan SAN=1 CUDA=0 TEST_ONLY=test_fault test-c

# halt_on_error: the first data race fails the test binary (and so the run); suppressions: none
# the whole suite, then the synthesis tests again with the scheduler's vocoder thread (the GPU
# backend's modes, COSY_SCHED_VOCODER_THREAD=1 and 2) so its hand-off is checked on the CPU too
# test_model is left out: a single-threaded file parser (the ASan run covers it; engine creation
# in every other test loads a model under TSan), whose corruption sweeps build the whole model at
# each harmless flipped byte, which under TSan took 158 s of the stage's 1174
TSAN_RUN = TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 $(TSAN_OPTIONS)"
test-tsan:
	$(TSAN_RUN) $(MAKE) B=build/tsan SAN=thread CUDA=0 TEST_SKIP=test_model TEST_JOBS=$(SAN_TEST_JOBS) test-c
	@echo "== the synthesis tests again with the vocoder thread (COSY_SCHED_VOCODER_THREAD=1)"
	COSY_SCHED_VOCODER_THREAD=1 $(TSAN_RUN) $(MAKE) B=build/tsan SAN=thread CUDA=0 \
	  TEST_ONLY="test_synth test_longtext test_textstream" TEST_JOBS=$(SAN_TEST_JOBS) test-c
	@echo "== ... and with it for capped batches only (COSY_SCHED_VOCODER_THREAD=2, the GPU's mode), batches of 8 frames"
	COSY_SCHED_VOCODER_THREAD=2 COSY_SCHED_FLOW_FRAMES=8 $(TSAN_RUN) $(MAKE) B=build/tsan SAN=thread \
	  CUDA=0 TEST_ONLY="test_synth test_textstream" TEST_JOBS=$(SAN_TEST_JOBS) test-c

# comments and documents cite only the repository (docs/*.md), never outside documents
check-citations:
	@bash tools/check_citations.sh

# the raw benchmark logs of bench/results/: every one cited, every citation found
check-bench:
	@bash tools/check_bench.sh

# no getenv in lib/ or kernels/ outside lib/knobs.c, every knob in docs/knobs.md; part of make test
.PHONY: check-knobs
test: check-knobs
check-knobs:
	@bash tools/check_knobs.sh

# every cosy_k_* launcher declared in kernels/*.h is in the kernel registry (tests/kregistry.c)
check-kernels:
	@bash tools/check_kernel_registry.sh

# the call graph between the files of lib/ from the objects' defined and undefined symbols (nm)
check-layers: $(LIB_OBJ)
	@bash tools/check_layers.sh --self-test
	@bash tools/check_layers.sh $(B) $(filter $(B)/obj/lib/%,$(LIB_OBJ))

check-header:
	$(CC) -std=c99 -pedantic -Wall -Wextra -Werror -Iinclude -fsyntax-only tests/header/c99.c
	$(CXX) -std=c++11 -pedantic -Wall -Wextra -Werror -Iinclude -fsyntax-only tests/header/cxx.cpp

bench: $(BENCH_BIN)

# ---- ABI ---------------------------------------------------------------------------------------
check-abi: $(SO)
	@nm -D --defined-only $(SO) | awk '$$2 ~ /^[TDBRV]$$/ {print $$3}' | sed 's/@.*//' | \
	  sort -u > $(B)/abi.symbols
	@if diff -u abi/cosyvoice.symbols $(B)/abi.symbols; then \
	  echo "check-abi: $$(wc -l < $(B)/abi.symbols) exported symbols match abi/cosyvoice.symbols"; \
	else echo "check-abi: exported symbols drifted from abi/cosyvoice.symbols"; exit 1; fi

# ---- install -----------------------------------------------------------------------------------
$(B)/cosyvoice.pc: pkgconfig/cosyvoice.pc.in Makefile
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(LDLIBS_ALL)|' $< > $@

install: lib $(CLI) $(B)/cosyvoice.pc
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(BINDIR)
	install -m 644 include/cosyvoice.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(SO) $(DESTDIR)$(LIBDIR)/
	ln -sf libcosyvoice.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libcosyvoice.so
	install -m 644 $(A) $(DESTDIR)$(LIBDIR)/
	install -m 644 $(B)/cosyvoice.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -m 755 $(CLI) $(DESTDIR)$(BINDIR)/

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/cosyvoice.h $(DESTDIR)$(LIBDIR)/libcosyvoice.* \
	      $(DESTDIR)$(PKGCONFIGDIR)/cosyvoice.pc $(DESTDIR)$(BINDIR)/cosyvoice-say

# ---- demo --------------------------------------------------------------------------------------
DEMO_MODEL := $(B)/demo/demo.gguf
$(DEMO_MODEL): tools/make_model.py tools/convert.py $(CONVERT_PY)
	@mkdir -p $(dir $@)
	$(PYTHON) tools/make_model.py --preset demo --frontend preset -o $@ --voice $(B)/demo/demo-voice.gguf

# the shared library too: the Python package, the server and the examples load it
demo: lib $(CLI) $(DEMO_MODEL)
	$(CLI) -m $(DEMO_MODEL) -v $(B)/demo/demo-voice.gguf -o demo.wav \
	  "Hello from libcosyvoice. This demo model has random weights, so it babbles."

# ---- examples in other languages, against an installed copy ------------------------------------
# Installs into $(B)/prefix, makes the demo model and voice, then builds and runs examples/c and
# examples/cpp through pkg-config, runs the Python ctypes test, and the Go and Rust tests when
# `go` / `cargo` are on PATH (a SKIP line otherwise). Every language also clones a voice from a
# WAV (EX_WAV), saves it and says something with it (the demo model has small random front-end
# models). Everything finds the library only through
# PKG_CONFIG_PATH and LD_LIBRARY_PATH pointing into the prefix. Go and cargo keep their caches
# under $(B) and read no user settings (GOENV=off; CARGO_HOME, so not ~/.cargo/config.toml either),
# so neither writes to HOME; a rustup cargo still finds its toolchain through RUSTUP_HOME, else
# HOME (docs/testing.md: "What the build and the tests take from the environment").
EX_PREFIX := $(abspath $(B))/prefix
EX_OUT := $(abspath $(B))/examples
EX_MODEL := $(abspath $(DEMO_MODEL))
EX_VOICE := $(abspath $(B)/demo/demo-voice.gguf)
# the cloning examples' prompt: the shared 16-bit 22.05 kHz recording, else the C streaming
# example's output (16-bit, 24 kHz)
EX_WAV := $(or $(wildcard $(abspath $(SHARED_DIR))/audio/cross_lingual_prompt.wav),$(EX_OUT)/c/stream.wav)
EX_ENV := PKG_CONFIG_PATH=$(EX_PREFIX)/lib/pkgconfig LD_LIBRARY_PATH=$(EX_PREFIX)/lib \
          COSY_MODEL=$(EX_MODEL) COSY_VOICE=$(EX_VOICE) COSY_PROMPT_WAV=$(EX_WAV)
EX_TEXT := "Hello from the examples. Every language streams the same voice."
EX_CLONE_TEXT := "Hello from a voice cloned from a recording."

.PHONY: test-examples
test-examples: $(DEMO_MODEL)
	@rm -f $(B)/cosyvoice.pc   # generated with the prefix in it: make it for EX_PREFIX...
	$(MAKE) --no-print-directory install PREFIX=$(EX_PREFIX) DESTDIR=
	@rm -f $(B)/cosyvoice.pc   # ...and not leave it for a later `make install`
	@echo "== examples/c (pkg-config: $$($(EX_ENV) pkg-config --cflags --libs cosyvoice))"
	$(EX_ENV) $(MAKE) --no-print-directory -C examples/c O=$(EX_OUT)/c
	$(EX_ENV) $(EX_OUT)/c/stream_wav $(EX_MODEL) $(EX_VOICE) $(EX_OUT)/c/stream.wav $(EX_TEXT) 7
	$(PYTHON) -c "import sys, wave; w = wave.open(sys.argv[1]); n = w.getnframes(); \
	  assert n > 0 and w.getsampwidth() == 2, n; print('stream.wav: %d frames, header patched' % n)" \
	  $(EX_OUT)/c/stream.wav
	$(EX_ENV) $(EX_OUT)/c/stream_text $(EX_MODEL) $(EX_VOICE) $(EX_OUT)/c/stream_text.wav $(EX_TEXT) 20 7
	$(PYTHON) -c "import sys, wave; w = wave.open(sys.argv[1]); n = w.getnframes(); \
	  assert n > 0 and w.getsampwidth() == 2, n; print('stream_text.wav: %d frames' % n)" \
	  $(EX_OUT)/c/stream_text.wav
	$(EX_ENV) $(EX_OUT)/c/clone_voice $(EX_MODEL) $(EX_WAV) "What the prompt says." \
	  $(EX_OUT)/c/clone.voice.gguf $(EX_OUT)/c/clone.wav $(EX_CLONE_TEXT)
	@echo "== examples/cpp"
	$(EX_ENV) $(MAKE) --no-print-directory -C examples/cpp O=$(EX_OUT)/cpp
	$(EX_ENV) $(EX_OUT)/cpp/example $(EX_MODEL) $(EX_VOICE)
	$(EX_ENV) $(EX_OUT)/cpp/clone $(EX_MODEL) $(EX_WAV) "What the prompt says." \
	  $(EX_OUT)/cpp/clone.voice.gguf
	@echo "== examples/python (the cosyvoice package from python/, found through pkg-config)"
	$(EX_ENV) PYTHONPATH=$(abspath python) $(PYTHON) examples/python/say.py $(EX_MODEL) $(EX_VOICE) \
	  $(EX_OUT)/python.wav $(EX_TEXT) --stream
	$(PYTHON) -c "import sys, wave; w = wave.open(sys.argv[1]); n = w.getnframes(); \
	  assert n > 0 and w.getsampwidth() == 2, n; print('python.wav: %d frames' % n)" $(EX_OUT)/python.wav
	$(EX_ENV) PYTHONPATH=$(abspath python) $(PYTHON) examples/python/say.py $(EX_MODEL) $(EX_VOICE) \
	  $(EX_OUT)/python-text.wav $(EX_TEXT) --text-stream --delay-ms 20
	$(EX_ENV) PYTHONPATH=$(abspath python) $(PYTHON) examples/python/clone.py $(EX_MODEL) $(EX_WAV) \
	  "What the prompt says." $(EX_OUT)/python-clone.voice.gguf $(EX_OUT)/python-clone.wav $(EX_CLONE_TEXT)
	@echo "== examples/go"
	@if command -v go >/dev/null 2>&1; then \
	  cd examples/go && export $(EX_ENV) GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-modcacherw \
	    GOENV=off GOTELEMETRY=off GOCACHE=$(EX_OUT)/go/cache GOPATH=$(EX_OUT)/go/path && \
	  echo "$$(go version): go vet ./... && go test ./..." && go vet ./... && go test -count=1 -v ./... && \
	  go run ./cmd/clone -model $(EX_MODEL) -prompt $(EX_WAV) -transcript "What the prompt says." \
	    -save $(EX_OUT)/go/clone.voice.gguf -o $(EX_OUT)/go/clone.wav $(EX_CLONE_TEXT) ; \
	else echo "SKIP: examples/go (no go on PATH: apt-get install golang-go)"; fi
	@echo "== examples/rust"
	@if command -v cargo >/dev/null 2>&1; then \
	  export $(EX_ENV) CARGO_TARGET_DIR=$(EX_OUT)/cargo CARGO_HOME=$(EX_OUT)/cargo-home && \
	  { cargo --version >/dev/null 2>&1 || { echo "examples/rust: \`cargo --version\` fails (a rustup" \
	    "cargo finds its toolchain through RUSTUP_HOME, else HOME=$$HOME)"; exit 1; }; } && \
	  echo "$$(cargo --version): cargo test --offline" && \
	  cargo test --offline --manifest-path examples/rust/Cargo.toml -- --nocapture && \
	  cargo run --offline --quiet --manifest-path examples/rust/Cargo.toml --example clone -- \
	    $(EX_MODEL) $(EX_WAV) "What the prompt says." $(EX_OUT)/rust-clone.voice.gguf \
	    $(EX_OUT)/rust-clone.wav $(EX_CLONE_TEXT) ; \
	else echo "SKIP: examples/rust (no cargo on PATH)"; fi
	@echo "test-examples: ok"

# ---- Python: the package (python/, with its speech server cosyvoice.server), Triton (serving/triton)
# The package is pip-installed (from a copy under $(B), so python/ gets no build files) into the
# virtual environment of tools/setup.sh, with the library of this build inside it (python/setup.py
# links it from this build's objects: make pylib), and tested there with that library (named by
# COSYVOICE_LIB as well) and the small test model; the server and Triton tests start real servers
# on loopback ports.
VENV ?= build/venv
VENV_PY := $(abspath $(VENV))/bin/python
PYTEST_ARGS ?=
.PHONY: test-python typecheck-python
test-python: $(SO) $(TEST_MODEL) $(FE_TEST_MODEL) typecheck-python
	@if [ ! -x $(VENV_PY) ]; then echo "test-python: no virtual environment $(VENV)" \
	  "(bash tools/setup.sh --venv makes it; VENV= names another)"; exit 1; fi
	rm -rf $(B)/pysrc && cp -r python $(B)/pysrc && rm -rf $(B)/pysrc/build $(B)/pysrc/*.egg-info
	COSYVOICE_SOURCE_DIR=$(CURDIR) COSYVOICE_BUILD_DIR=$(abspath $(B)) \
	  $(VENV_PY) -m pip install -q --no-build-isolation --no-deps --force-reinstall $(B)/pysrc
	cd $(B) && env -u COSYVOICE_LIB $(VENV_PY) -c "import cosyvoice, os; i = cosyvoice.debug_info(); \
	  assert i['library'].startswith(os.path.dirname(cosyvoice.__file__)), i; \
	  print('cosyvoice package', cosyvoice.__file__, 'with its library:', i['version'])"
	COSYVOICE_LIB=$(abspath $(B))/lib/$(SONAME) COSY_TEST_MODEL=$(abspath $(TEST_MODEL)) \
	  COSY_TEST_FE_MODEL=$(abspath $(FE_TEST_MODEL)) $(VENV_PY) -m pytest -q -p no:cacheprovider \
	  python/tests serving/triton/tests $(PYTEST_ARGS)

# the Python package's annotations checked with mypy (python/pyproject.toml [tool.mypy]: the public
# API strictly, plus python/tests/typed_usage.py, code written against it)
typecheck-python:
	@if [ ! -x $(VENV_PY) ]; then echo "typecheck-python: no virtual environment $(VENV)" \
	  "(bash tools/setup.sh makes it; VENV= names another)"; exit 1; fi
	cd python && $(VENV_PY) -m mypy --cache-dir $(abspath $(B))/mypy-cache

clean:
	rm -rf build

# ---- fuzzing (libFuzzer + clang): make fuzz, make fuzz-ci -------------------------------------
include tests/fuzz/fuzz.mk
