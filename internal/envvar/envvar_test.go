package envvar

import (
	"strings"
	"testing"
	"time"
)

func TestFlagName(t *testing.T) {
	for env, want := range map[string]string{"LETTAQ_STALL_TIMEOUT": "stall-timeout", "REDIS_URL": "redis-url", "LETTA_API_KEY": "letta-api-key"} {
		if got := FlagName(env); got != want {
			t.Errorf("FlagName(%q) = %q, want %q", env, got, want)
		}
	}
}

func TestParseBool(t *testing.T) {
	for _, raw := range []string{"1", "t", "TRUE", " yes ", "y", "On"} {
		if b, err := ParseBool(raw); err != nil || !b {
			t.Errorf("ParseBool(%q) = %v, %v; want true", raw, b, err)
		}
	}
	for _, raw := range []string{"0", "f", "False", "no", "n", "off"} {
		if b, err := ParseBool(raw); err != nil || b {
			t.Errorf("ParseBool(%q) = %v, %v; want false", raw, b, err)
		}
	}
	if _, err := ParseBool("maybe"); err == nil || !strings.Contains(err.Error(), "want true or false") {
		t.Errorf("ParseBool(maybe) = %v", err)
	}
}

func TestParseDuration(t *testing.T) {
	if d, err := ParseDuration(" 1m30s "); err != nil || d != 90*time.Second {
		t.Errorf("ParseDuration(1m30s) = %v, %v", d, err)
	}
	for raw, want := range map[string]string{"75": "write a duration with a unit, e.g. 75s or 75m", "soon": "write a duration with a unit, e.g. 500ms, 5s or 2m"} {
		if _, err := ParseDuration(raw); err == nil || err.Error() != want {
			t.Errorf("ParseDuration(%q) = %v, want %q", raw, err, want)
		}
	}
}

func TestParseNumbers(t *testing.T) {
	if f, err := ParseFloat(" 0.25"); err != nil || f != 0.25 {
		t.Errorf("ParseFloat = %v, %v", f, err)
	}
	if _, err := ParseFloat("double"); err == nil || strings.Contains(err.Error(), "double") {
		t.Errorf("ParseFloat(double) = %v, want the reason without the value", err)
	}
	if n, err := ParseInt(" 12 "); err != nil || n != 12 {
		t.Errorf("ParseInt = %v, %v", n, err)
	}
	if _, err := ParseInt("many"); err == nil || err.Error() != "write a whole number, e.g. 10" {
		t.Errorf("ParseInt(many) = %v", err)
	}
}
