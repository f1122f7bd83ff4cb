package agentclient

import (
	"context"
	"net/http"
	"testing"
)

// An in-band `event: error` that names a run_id is not evidence of the
// turn's own run (it may name the run that holds the thread): the state
// does not take its run_id, so a continuation looks for the otid instead of
// following another run. A run named by a ping or a message is taken.
func TestInBandErrorRunIDIsNotAdopted(t *testing.T) {
	leakCheck(t)
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			sse(w, "event: error\ndata: {\"message_type\":\"error_message\",\"run_id\":\"run-other\",\"error_type\":\"internal_error\",\"message\":\"Another request is being processed\"}\n\n")
		})
		c := newClient(t, tr, rs.URL, Clocks{})
		st := NewStreamState()
		err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{})
		if err == nil {
			t.Fatal("want the in-band error")
		}
		if got := st.RunID(); got != "" {
			t.Errorf("state took run %q from an error event: a continuation would follow another run", got)
		}
	})
}
