package payloadcheck

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestMayHoldRewrites(t *testing.T) {
	for in, want := range map[string]bool{
		`{"a":"b"}`:          false,
		`{"a":"\n\"\\"}`:     false,
		`{"a":"\u00e9"}`:     false,
		`{"a":"\ud7ff"}`:     false,
		`{"a":"\ue000"}`:     false,
		`{"a":"\\ud800"}`:    false,
		`{"a":"\ud800"}`:     true,
		`{"a":"\uD800"}`:     true,
		`{"a":"\udfff"}`:     true,
		`{"a":"\uDFFF"}`:     true,
		`{"a":"\uDc00"}`:     true,
		`{"a":"\\\ud800"}`:   true,
		`{"a":"\ud83d\ude00`: true, // a pair: the second decode decides
		"{\"a\":\"\xff\"}":   true,
		`\ud8`:               true, // too short for an escape: the decoder decides
		`\ud`:                false,
		``:                   false,
	} {
		if got := MayHoldRewrites([]byte(in)); got != want {
			t.Errorf("MayHoldRewrites(%s) = %v, want %v", in, got, want)
		}
	}
}

// FuzzDecodePayloadSkip: where MayHoldRewrites says no, the second decode
// finds nothing (skipping it changes nothing).
func FuzzDecodePayloadSkip(f *testing.F) {
	f.Add([]byte(`{"v":1,"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"\ud800"}}`))
	f.Add([]byte(`{"v":1,"agent_id":"a\\ud800","text":"\uD83D\uDE00","conversation":{"integration":"web","chat_id":"c"},"otid":"\u00e9"}`))
	f.Add([]byte(`{"V":1,"AGENT_ID":"\udc00","text":"x"} {"text":"\ud800"}`))
	f.Add([]byte("{\"text\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if MayHoldRewrites(b) {
			return
		}
		for _, whole := range []bool{false, true} {
			var raw rawPayloadStrings
			var err error
			if whole {
				err = json.Unmarshal(b, &raw)
			} else {
				err = json.NewDecoder(bytes.NewReader(b)).Decode(&raw)
			}
			if err != nil {
				continue
			}
			if field := raw.fault(); field != "" {
				t.Fatalf("%q (whole %v): MayHoldRewrites says no, the second decode finds %s", b, whole, field)
			}
		}
	})
}
