# wardend's container image: the monitor and wardenctl (for the health
# check and for operators), on Debian slim, as a non-root user.
#
#   docker build --build-arg WARDEN_COMMIT="$(git rev-parse --short=12 HEAD)" -t warden .
#   podman build --format docker --build-arg WARDEN_COMMIT="$(git rev-parse --short=12 HEAD)" -t warden .
#
# (podman's default OCI format drops HEALTHCHECK: hence --format docker.)
# scripts/container-check builds this file and runs the image for real.

FROM docker.io/library/rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# .git is not in the build context (.dockerignore): the commit that
# `wardend --version` prints comes in as a build argument.
ARG WARDEN_COMMIT=unknown
# The cache mounts keep the crates.io downloads and the target folder
# between builds, so a rebuild compiles only what changed; the binaries are
# copied out of the target cache into /out, the only thing the next stage
# takes. The optional secret `cargo-ca` is a CA bundle for a build host
# whose egress goes through a TLS-inspecting proxy: it is mounted for this
# step only and never becomes part of a layer.
RUN --mount=type=cache,id=warden-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=warden-cargo-git,target=/usr/local/cargo/git \
    --mount=type=cache,id=warden-target,target=/src/target \
    --mount=type=secret,id=cargo-ca,required=false \
    set -eu; \
    if [ -s /run/secrets/cargo-ca ]; then export CARGO_HTTP_CAINFO=/run/secrets/cargo-ca; fi; \
    WARDEN_COMMIT="$WARDEN_COMMIT" cargo build --locked --profile dist \
        -p warden-monitor --bin wardend -p warden-approver-cli --bin wardenctl; \
    install -D -m 0755 -t /out/usr/local/bin target/dist/wardend target/dist/wardenctl

# Debian slim rather than distroless: the binaries link glibc dynamically
# (and libgcc_s), which both have; slim also has a shell for `docker exec`
# when something goes wrong, for about 50 MB more.
FROM docker.io/library/debian:bookworm-slim
ARG WARDEN_COMMIT=unknown
LABEL org.opencontainers.image.title="wardend" \
      org.opencontainers.image.description="Warden: the authority that AI-agent harnesses ask before an agent acts" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${WARDEN_COMMIT}"
# A fixed uid, so that a host folder mounted as the data volume can be
# chowned to it before the first start (chown 10001:10001 DIR), and so that
# Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
RUN groupadd --system --gid 10001 warden \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/warden --no-create-home \
        --shell /usr/sbin/nologin warden \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/warden
COPY --from=build /out/usr/local/bin/ /usr/local/bin/
# The bundled policies, so that the image runs alone; in production mount
# your own over them, read-only (-v ./policies:/etc/warden/policies:ro).
# Owned by root either way: the monitor reads them, it never writes them.
COPY policies/ /etc/warden/policies/
# wardend sets this itself by running itself again (see monitor/src/main.rs);
# set here, that second exec is not needed.
ENV MIMALLOC_PURGE_DELAY=0
# What every wardenctl inside the container talks to, the health check
# included. Listening elsewhere (another port, TLS) means setting this too,
# e.g. -e WARDEN_ENDPOINT=https://localhost:50051 -e WARDEN_CA_CERT=/etc/warden/tls/ca.crt
ENV WARDEN_ENDPOINT=http://127.0.0.1:50051
# The sled store, the audit log, the checkpoint key and the first-start
# tokens (harness.token, approver.token, admin.token, mode 0600).
VOLUME ["/var/lib/warden"]
USER 10001:10001
WORKDIR /var/lib/warden
EXPOSE 50051
# grpc.health.v1 Check for the whole server: SERVING exits 0. While the
# monitor shuts down it answers NOT_SERVING.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/wardenctl", "health"]
# The image's layout is fixed in the entrypoint; where to listen is the
# command, which a user replaces. wardend installs its own SIGTERM handler
# (finish what is in flight, flush the store) and starts no children, so it
# runs as PID 1 without an init.
ENTRYPOINT ["/usr/local/bin/wardend", "--policies", "/etc/warden/policies", "--data", "/var/lib/warden"]
# Loopback by default. wardend refuses plaintext on any other address,
# because bearer tokens would cross the network in the clear, and an image
# cannot ship a certificate for a name it does not know. On loopback the
# image serves, as it is, the harnesses that share its network namespace: a
# sidecar in the agent's pod, or --network host. To serve other hosts,
# mount a certificate and key and replace the command:
#   --listen 0.0.0.0:50051 --tls-cert /etc/warden/tls/tls.crt --tls-key /etc/warden/tls/tls.key
CMD ["--listen", "127.0.0.1:50051"]
