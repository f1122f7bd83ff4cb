package app

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"
)

// ParseLevel parses debug, info, warn (warning) or error.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, errors.New("want debug, info, warn or error")
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// NewLogger returns the one logger of a command: tint's colored text when format is "auto" and
// w is a terminal (or format is "text"), JSON otherwise.
func NewLogger(w io.Writer, format, level string) *slog.Logger {
	lvl, err := ParseLevel(level)
	if err != nil {
		lvl = slog.LevelInfo
	}
	switch {
	case format == "text" || (format != "json" && IsTerminal(w)):
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly, NoColor: !IsTerminal(w),
			ReplaceAttr: logAttr}))
	default:
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: logAttr}))
	}
}

// logAttr writes every duration one way, as Go's duration text ("100ms", "4m46s"): the
// way lettaq's settings are written, and the way lines that format a duration themselves
// write it. Without it slog's JSON handler writes a time.Duration as integer nanoseconds.
func logAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
