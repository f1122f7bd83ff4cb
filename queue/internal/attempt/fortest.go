package attempt

// ForTest completes a pipeline that a test of package queue made by hand from a worker's parts
// (W, Jr, Rn, ID, Logger, Actx, …) as Parts.Process completes its own: its registration in the
// takeover registry when register is set, then its record writer and its completer. It is the
// one way in for those tests, which drive one step of an attempt (a gate, a park, a takeover's
// fence) against a real worker; an attempt's own parts are tested in this package.
func ForTest(t *Pipeline, register bool) *Pipeline {
	if register {
		t.Tk = newRegistration(t)
	}
	assemble(t)
	return t
}
