// Package line is the chat's line as the worker sees it: an attempt's
// place in its conversation's line (acquire, the lease, release and the
// wake-up of the next turn, the messages merged into it), parking a turn
// that must wait and waking it again, and the park sweeper's work.
//
// The line is ordering's (package ordering: the Sequencer and its keys);
// the parking records are store.Parking's. The attempt holds one *Place;
// the worker holds one *Lines. Nothing here writes a turn's journal
// record or its reply events: the attempt does that with what these parts
// return (ErrParked and what the turn waits behind, the merged messages);
// the sweep asks the worker whether a turn is over (Config.Finished).
package line
