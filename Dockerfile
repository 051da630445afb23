# syntax=docker/dockerfile:1
# Steward operator image. Build:  docker build -t <registry>/steward:<version> .
# Nothing is published from the Steward repository; see docs/deployment.md.

# --- build ---------------------------------------------------------------------------------
FROM rust:1.95-bookworm AS builder
WORKDIR /src
# Only what the build reads: docs, deploy/ and examples/ changes do not invalidate this layer.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
# The cache mounts keep the crates.io registry and target/ between builds (BuildKit).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p steward-operator \
    && install -D -m 0755 target/release/steward /out/steward

# --- runtime -------------------------------------------------------------------------------
# glibc + libgcc + CA certificates, no shell, no package manager; "nonroot" is UID/GID 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="steward" \
      org.opencontainers.image.description="Steward Kubernetes operator for etcd, PostgreSQL, CrateDB and FoundationDB" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/steward /steward
# Numeric, so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/steward"]
CMD ["operator"]
