package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Exit codes of `worker healthcheck`, as Docker's HEALTHCHECK reads them (2 is reserved there,
// so even bad configuration reports "unhealthy").
const (
	HealthOK        = 0
	HealthUnhealthy = 1
)

const healthcheckUsage = `Usage: worker healthcheck [--http-addr ADDR] [--http-token TOKEN] [--timeout D]

Asks this container's (or host's) worker whether it is ready: GET /readyz on LETTAQ_HTTP_ADDR
(0.0.0.0 and :: become loopback), with LETTAQ_HTTP_TOKEN as a Bearer token when it is set.
Prints the answer. Exit 0 when ready (200), 1 otherwise: not ready (503), nothing listening, a
bad address, or LETTAQ_HTTP_ADDR=off. Meant for Docker's healthcheck, in an image without a
shell or wget:

  healthcheck:
    test: ["CMD", "/usr/local/bin/worker", "healthcheck"]

  --http-addr ADDR   the worker's listener (env LETTAQ_HTTP_ADDR, default ` + DefaultHTTPAddr + `)
  --http-token TOKEN the listener's token (env LETTAQ_HTTP_TOKEN, default unset)
  --timeout D        give up after D (default 3s; keep it below the healthcheck's own timeout)
`

// RunHealthcheck is `worker healthcheck`: one GET of the worker's own /readyz. It returns
// HealthOK when the worker answers 200 and HealthUnhealthy for anything else.
func RunHealthcheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	envOr := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	addr := fs.String("http-addr", envOr("LETTAQ_HTTP_ADDR", DefaultHTTPAddr), "")
	token := fs.String("http-token", envOr("LETTAQ_HTTP_TOKEN", ""), "")
	timeout := 3 * time.Second
	fs.Var(durationValue{&timeout}, "timeout", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, healthcheckUsage)
			return HealthOK
		}
		fmt.Fprintf(stderr, "worker healthcheck: %v (see --help)\n", flagError(err))
		return HealthUnhealthy
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "worker healthcheck: unexpected argument %q (see --help)\n", fs.Arg(0))
		return HealthUnhealthy
	}
	target, err := healthcheckTarget(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "worker healthcheck: %v\n", err)
		return HealthUnhealthy
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path := "/readyz"
	if *token != "" {
		path += "?verbose=1" // with the token, /readyz also says why
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "worker healthcheck: %v\n", err)
		return HealthUnhealthy
	}
	if *token != "" {
		req.Header.Set("Authorization", "Bearer "+*token)
	}
	// Straight to the listener: no proxy from the environment.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "worker healthcheck: no answer from %s: %v\n", target, err)
		return HealthUnhealthy
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "worker healthcheck: not ready (%s): %s\n", resp.Status, strings.TrimSpace(string(body)))
		return HealthUnhealthy
	}
	fmt.Fprintf(stdout, "ready: %s\n", strings.TrimSpace(string(body)))
	return HealthOK
}

// healthcheckTarget turns a listen address into one to connect to: an unspecified host
// (0.0.0.0, ::, or none) is reached on loopback.
func healthcheckTarget(addr string) (string, error) {
	if addr == "off" {
		return "", errors.New("LETTAQ_HTTP_ADDR is off: the worker has no listener to check")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("LETTAQ_HTTP_ADDR=%q: want host:port", addr)
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}
