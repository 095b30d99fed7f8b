# omniserve container: a builder stage with the Go toolchain and the -dev packages, then a slim
# runtime with only the shared libraries the binary links and the ASR model data.
# NOTE: Docker cannot run on the machines this project is developed on; this file is untested.

FROM golang:1.26-bookworm AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      pkg-config nlohmann-json3-dev libstb-dev flite1-dev libpocketsphinx-dev libsphinxbase-dev \
      pocketsphinx-en-us libwebrtc-audio-processing-dev libspeexdsp-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The Makefile carries the CPU flags (-march=x86-64-v3) and the build-only header path.
RUN make build

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates libstdc++6 libflite1 libpocketsphinx3 libsphinxbase3 pocketsphinx-en-us \
      libwebrtc-audio-processing1 libspeexdsp1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --create-home --home-dir /home/omniserve omniserve
COPY --from=builder /src/bin/omniserve /usr/local/bin/omniserve
COPY --from=builder /src/configs /etc/omniserve
USER omniserve
WORKDIR /home/omniserve
ENV OMNISERVE_CONFIG=/etc/omniserve/omni-cpu.yaml
EXPOSE 8000
# The dummy model is generated into ~/.cache/omniserve on first start; mount a volume there to keep it.
ENTRYPOINT ["omniserve"]
CMD ["serve"]
