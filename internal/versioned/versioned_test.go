package versioned

import (
	"errors"
	"strconv"
	"testing"
)

type rec struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
}

func TestDecode(t *testing.T) {
	version := func(r *rec) int { return r.Version }
	for _, tc := range []struct {
		name      string
		b         string
		malformed bool
		version   bool
	}{
		{"of this version", `{"version":2,"name":"a"}`, false, false},
		{"torn", `{"version":2,"na`, true, false},
		{"empty", ``, true, false},
		{"another version", `{"version":3,"name":"a"}`, false, true},
		{"no version", `{"name":"a"}`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Decode("the record", []byte(tc.b), version, 2)
			var ve *VersionError
			switch {
			case !tc.malformed && !tc.version && (err != nil || r.Name != "a"):
				t.Errorf("Decode = %+v, %v", r, err)
			case tc.malformed && !errors.Is(err, ErrDamaged):
				t.Errorf("Decode = %v, want ErrDamaged", err)
			case tc.version && (!errors.As(err, &ve) || ve.Want != 2 || err.Error() != "the record has version "+strconv.Itoa(ve.Got)+", this node reads 2"):
				t.Errorf("Decode = %v, want a VersionError", err)
			}
		})
	}
}
