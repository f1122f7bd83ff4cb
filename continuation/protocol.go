package continuation

import (
	"errors"

	"github.com/lettaq/lettaq/agentclient"
)

// protocolFailed ends a turn whose server broke the protocol or passed one
// of the client's byte limits (an *agentclient.ProtocolError): Failed, not
// retryable, with the violation as the reason. Nothing is looked up or sent
// again: the same server would answer the same way.
func protocolFailed(d Result, err error, st *agentclient.StreamState) Result {
	d.Outcome, d.Retryable, d.Err = Failed, false, err
	if d.RunID == "" {
		d.RunID = st.RunID()
	}
	if d.Evidence == "" {
		d.Evidence = evidenceOf(st)
	}
	d.Reason = "the agent server broke the protocol: " + err.Error()
	return d
}

// protocolErr returns the protocol violation in err, or the state's passed
// transcript limit, or nil.
func protocolErr(err error, st *agentclient.StreamState) error {
	var pe *agentclient.ProtocolError
	if errors.As(err, &pe) {
		return pe
	}
	if pe := st.LimitErr(); pe != nil {
		return pe
	}
	return nil
}
