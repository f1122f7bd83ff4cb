package attempt

// MaxToolReturnBytes is the most of a tool's return that an event carries
// (queue.Replies cuts longer returns at a rune boundary and sets
// Truncated); the attempt's reply budget counts no more of it.
const MaxToolReturnBytes = 2048
