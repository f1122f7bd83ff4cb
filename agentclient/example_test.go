package agentclient_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/integration/lettasim"
)

// Send one message and read the turn's stream, against the simulator.
func ExampleClient_SendStream() {
	sim := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer sim.Close()
	agent := sim.CreateAgent("demo", nil)

	c, err := agentclient.New(agentclient.Config{BaseURL: sim.URL})
	if err != nil {
		panic(err)
	}
	st := agentclient.NewStreamState() // owned by the caller: survives the read
	err = c.SendStream(context.Background(), agentclient.SendRequest{
		AgentID: agent, Text: "hello", Otid: "5c1f3c6e-9d0b-4a57-8a34-0d1a2f6b7c80",
	}, st, agentclient.StreamOptions{Clocks: agentclient.Clocks{Stall: 30 * time.Second}})
	fmt.Println(err, st.StopReason(), st.Answer())
	// Output: <nil> end_turn you said: hello
}
