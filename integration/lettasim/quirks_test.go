package lettasim_test

import (
	"testing"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// The misbehaviours a client must survive, each on demand: message lists
// that ignore the after cursor (ignore_after) or list a page reversed
// (reverse_order), resumes that replay from the start whatever
// starting_after asked (ignore_starting_after), and a conversation deleted
// while its run goes on (Sim.DeleteConversation).
func TestListQuirksReplayAndDeletedConversation(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("quirks", nil)
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "[[sim tool=web_search ignore_starting_after]] q", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	runID := evs[0].str("run_id")
	ids := func(path string) []string {
		var msgs []map[string]any
		getJSON(t, srv, path, &msgs)
		var out []string
		for _, m := range msgs {
			out = append(out, m["id"].(string)+"/"+m["message_type"].(string))
		}
		return out
	}
	base := "/v1/runs/" + runID + "/messages?order=asc"
	all := ids(base)
	if len(all) < 4 {
		t.Fatalf("run messages %v", all)
	}
	firstID := all[0][:len(all[0])-len("/user_message")]
	if got := ids(base + "&after=" + firstID); eqStrings(got, all) {
		t.Fatalf("after is honoured without the fault: %v", got)
	}
	srv.SetListFault(agent, lettasim.ListFault{IgnoreAfter: true})
	if got := ids(base + "&after=" + firstID); !eqStrings(got, all) {
		t.Errorf("ignore_after: %v, want every page as the first %v", got, all)
	}
	srv.SetListFault(agent, lettasim.ListFault{ReverseOrder: true})
	// Rows come reversed; the parts of one row (its reasoning, then its text) stay in order.
	if got := ids(base); len(got) != len(all) || got[len(got)-1] != all[0] || got[0] != all[len(all)-2] {
		t.Fatalf("reverse_order: %v, want the rows of %v reversed", got, all)
	}
	srv.SetListFault(agent, lettasim.ListFault{})

	// The resume replays from the start: the first chunk after the ping is seq_id 1.
	st, re, rerr, data := resume(t, srv, runID, `{"starting_after": 3}`)
	if st != 200 || rerr != nil || len(re) < 2 || re[1].seq() != 1 {
		t.Fatalf("ignore_starting_after: %d %v %s; first chunk %v", st, rerr, data, re)
	}

	conv := srv.CreateConversation(agent, "")
	if !srv.DeleteConversation(conv) || srv.DeleteConversation(conv) {
		t.Fatal("DeleteConversation: want true once, then false")
	}
	for _, p := range []string{"/v1/conversations/" + conv, "/v1/conversations/" + conv + "/messages"} {
		if st, _, data := call(t, srv, "GET", p, nil); st != 404 {
			t.Errorf("GET %s after the delete: %d %s", p, st, data)
		}
	}
	if n := len(srv.Conversations(agent)); n != 0 {
		t.Errorf("%d conversations listed after the delete", n)
	}
}
