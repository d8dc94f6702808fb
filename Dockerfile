# syntax=docker/dockerfile:1
# libcosyvoice: an OpenAI-compatible speech server on a GPU (docs/container.md).
#
#   docker build -t cosyvoice .
#   docker run --gpus all -p 8000:8000 -v /path/to/models:/models cosyvoice
#
# /models holds model.gguf (tools/convert.py's output) and voices/NAME.gguf (saved voices); the
# environment variables below name other paths. Two stages: the wheel is built on the CUDA devel
# image with kernels for every supported GPU (sm_80 ... sm_120 + PTX), and installed with its
# [server] extra on the CUDA runtime image, which supplies the CUDA runtime and cuBLAS. Every
# build step is tools/container_build.sh, which CI runs as it is on its own machine
# (tests/test_wheel.sh); docs/container.md says what of this file was and was not run.
ARG CUDA_VERSION=13.0.1
ARG BASE_OS=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${BASE_OS} AS build
WORKDIR /src
COPY tools/container_build.sh tools/
RUN bash tools/container_build.sh deps-build
COPY . .
# a GPU wheel for every target, whatever GPU the build machine has (or none)
ENV COSYVOICE_CUDA=1 COSYVOICE_CUDA_ARCHS=all
RUN bash tools/container_build.sh wheel /wheels

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${BASE_OS}
COPY tools/container_build.sh /usr/local/share/cosyvoice/container_build.sh
RUN bash /usr/local/share/cosyvoice/container_build.sh deps-run
COPY --from=build /wheels /wheels
RUN bash /usr/local/share/cosyvoice/container_build.sh install /wheels /opt/cosyvoice server \
    && rm -rf /wheels /root/.cache/pip \
    && useradd --uid 1001 --create-home --shell /usr/sbin/nologin cosyvoice
ENV PATH=/opt/cosyvoice/bin:$PATH \
    COSYVOICE_MODEL=/models/model.gguf \
    COSYVOICE_VOICES=/models/voices \
    COSYVOICE_DEVICE=0
USER cosyvoice
EXPOSE 8000
VOLUME ["/models"]
# /health answers 200 once the model is loaded (503 after the device was lost); loading a
# full-size model takes a while, hence the start period
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
ENTRYPOINT ["cosyvoice-server", "--host", "0.0.0.0", "--port", "8000"]
