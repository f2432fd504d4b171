package rollout

import (
	"strings"
	"testing"
)

func TestNext(t *testing.T) {
	const v = "1.1.0"
	voter := func(name, version string) Member { return Member{Name: name, Version: version} }
	leader := func(name, version string) Member { return Member{Name: name, Version: version, Leader: true} }
	learner := func(name, version string) Member { return Member{Name: name, Version: version, Learner: true} }
	for _, tc := range []struct {
		name    string
		members []Member
		want    string // "" for none
		err     string
	}{
		{"followers by name, the leader last", []Member{leader("a", "1.0.0"), voter("c", "1.0.0"), voter("b", "1.0.0")}, "b", ""},
		{"the leader once the followers run it", []Member{leader("a", "1.0.0"), voter("b", v), voter("c", v)}, "a", ""},
		{"learners first", []Member{leader("a", "1.0.0"), voter("b", "1.0.0"), voter("c", "1.0.0"), learner("d", "1.0.0")}, "d", ""},
		{"a leader that moved", []Member{voter("a", v), leader("b", "1.0.0"), voter("c", "1.0.0")}, "c", ""},
		{"done", []Member{leader("a", v), voter("b", v), voter("c", v)}, "", ""},
		{"done, however small", []Member{leader("a", v)}, "", ""},
		{"two voters lose quorum", []Member{leader("a", "1.0.0"), voter("b", "1.0.0")}, "", "has 2 voters: it loses quorum"},
		{"one voter", []Member{leader("a", "1.0.0")}, "", "has 1 voters"},
		{"learners are no voters", []Member{leader("a", "1.0.0"), voter("b", "1.0.0"), learner("c", "1.0.0")}, "", "has 2 voters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, ok, err := Next(tc.members, v)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Next = %v, %v, %v; want error %q", next.Name, ok, err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.want == "" && ok:
				t.Fatalf("Next = %s; want none", next.Name)
			case tc.want != "" && (!ok || next.Name != tc.want):
				t.Fatalf("Next = %q, %v; want %q", next.Name, ok, tc.want)
			}
		})
	}
}
