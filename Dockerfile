# lettaq worker (and the enqueue CLI) in a small image.
# The tag matches go.mod's go line: the image's GOTOOLCHAIN=local refuses an older Go.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/worker ./cmd/worker \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/enqueue ./cmd/enqueue

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /out/enqueue /usr/local/bin/
# Goroutines start with the runtime's smallest stack (2 KiB) rather than the average it saw at
# the last GC: each in-flight turn's Asynq goroutine, which only waits for the turn's handler,
# keeps 2 KiB instead of 4 (README, Performance). GODEBUG is read once, at start.
ENV GODEBUG=adaptivestackstart=0
EXPOSE 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/worker"]
