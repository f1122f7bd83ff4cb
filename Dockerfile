# lettaq worker, the relay and the enqueue CLI in a small image.
# The tag matches go.mod's go line: the image's GOTOOLCHAIN=local refuses an older Go.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/worker ./cmd/worker \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/relay ./cmd/relay \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/enqueue ./cmd/enqueue

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /out/relay /out/enqueue /usr/local/bin/
EXPOSE 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/worker"]
