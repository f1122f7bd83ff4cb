package app

import (
	"log/slog"
	"os"
	"sort"
	"strings"
)

// Variables with lettaq's prefixes that the commands do not read but lettaq's own tests and
// benchmark do: never reported as unknown.
var testVarPrefixes = []string{"LETTAQ_E2E_", "LETTAQ_TEST_", "LETTAQ_BENCH_", "LETTAQ_REQUIRE_", "LETTAQ_BROWSER_", "LETTAQ_PRINT_TABLE"}

// unknownVar is an environment variable with lettaq's prefix that no command reads.
type unknownVar struct {
	Name    string
	Closest string // the known variable it is probably a misspelling of, "" if none is close
}

// knownVarNames is every variable the worker, enqueue or the relay reads (a shared environment
// serves them all).
func knownVarNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, v := range append(append(WorkerVars(), EnqueueVars...), RelayVars()...) {
		if !seen[v.Name] {
			seen[v.Name] = true
			names = append(names, v.Name)
		}
	}
	sort.Strings(names)
	return names
}

// unknownVars returns the set variables (non-empty by getenv) among environ's names that
// start with LETTAQ_ and that no command reads, and those starting with LETTA_ (a prefix Letta
// itself uses too) that are close misspellings of one lettaq reads.
func unknownVars(environ []string, getenv func(string) string) []unknownVar {
	known := knownVarNames()
	isKnown := map[string]bool{}
	for _, n := range known {
		isKnown[n] = true
	}
	var out []unknownVar
	seen := map[string]bool{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if seen[name] || isKnown[name] || strings.TrimSpace(getenv(name)) == "" {
			continue
		}
		seen[name] = true
		lettaq := strings.HasPrefix(name, "LETTAQ_")
		if !lettaq && !strings.HasPrefix(name, "LETTA_") {
			continue
		}
		if hasAnyPrefix(name, testVarPrefixes) {
			continue
		}
		closest := closestName(name, known)
		if !lettaq && closest == "" {
			continue // one of Letta's own variables, most likely
		}
		out = append(out, unknownVar{Name: name, Closest: closest})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// warnUnknownVars logs one line per unknown variable of the process's environment (the values
// are read with getenv, so a command run with another environment warns about that one).
func warnUnknownVars(logger *slog.Logger, getenv func(string) string) {
	for _, u := range unknownVars(os.Environ(), getenv) {
		if u.Closest != "" {
			logger.Warn("unknown environment variable, ignored", "name", u.Name, "did_you_mean", u.Closest)
		} else {
			logger.Warn("unknown environment variable, ignored", "name", u.Name, "known", "see --help")
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// closestName is the known name nearest to name by edit distance, when it is near enough to be
// a misspelling (at most 2 edits, or a fifth of the name), else a known name that ends with
// name's part after its prefix (LETTAQ_TOKEN → LETTAQ_HTTP_TOKEN); "" if none.
func closestName(name string, known []string) string {
	best, bestD := "", -1
	for _, k := range known {
		if d := editDistance(name, k); bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD >= 0 && bestD <= max(2, len(name)/5) {
		return best
	}
	_, suffix, _ := strings.Cut(name, "_")
	if suffix == "" {
		return ""
	}
	for _, k := range known {
		if strings.HasSuffix(k, "_"+suffix) {
			return k
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b (bytes: the names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
