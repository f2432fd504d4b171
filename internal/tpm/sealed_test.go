package tpm

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sealedFor returns a real sealed secret and its encoding.
func sealedFor(t *testing.T) (*Sealed, []byte) {
	t.Helper()
	tp := newTPM(t, 1)
	s, err := tp.Seal(secret32, DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

func TestSealedRoundTrip(t *testing.T) {
	s, b := sealedFor(t)
	got, err := UnmarshalSealed(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("UnmarshalSealed(Marshal()) (-want +got):\n%s", diff)
	}
}

func TestUnmarshalSealedRejects(t *testing.T) {
	_, good := sealedFor(t)
	// edit decodes good, applies f and encodes the result.
	edit := func(f func(j *sealedJSON)) []byte {
		var j sealedJSON
		if err := json.Unmarshal(good, &j); err != nil {
			t.Fatal(err)
		}
		f(&j)
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"garbage", []byte("\x00garbage"), "decoding sealed secret: invalid character"},
		{"truncated", good[:len(good)/2], "decoding sealed secret: unexpected end of JSON"},
		{"no version", edit(func(j *sealedJSON) { j.Version = 0 }), "version 0 not supported"},
		{"version 4", edit(func(j *sealedJSON) { j.Version = 4 }), "version 4 not supported"},
		{"version 2 with an epoch", edit(func(j *sealedJSON) { j.Version, j.Epoch = 2, 7 }), "version 2 has no epoch"},
		{"version 1 with values", edit(func(j *sealedJSON) { j.Version = 1 }), "version 1 has no values or srk_name"},
		{"short value", edit(func(j *sealedJSON) { j.Values[12] = j.Values[12][:31] }), "values: PCR 12: 31 bytes, want 32"},
		{"value missing", edit(func(j *sealedJSON) { delete(j.Values, 12) }), "values: 2 values for 3 PCRs"},
		{"value of another PCR", edit(func(j *sealedJSON) { j.Values[11] = j.Values[12]; delete(j.Values, 12) }), "values: PCR 12: 0 bytes"},
		{"no PCRs", edit(func(j *sealedJSON) { j.PCRs = nil }), "pcrs: no PCRs selected"},
		{"PCR 24", edit(func(j *sealedJSON) { j.PCRs = []uint{4, 24} }), "pcrs: PCR 24 out of range"},
		{"duplicate PCR", edit(func(j *sealedJSON) { j.PCRs = []uint{4, 7, 4} }), "pcrs: PCR 4 listed twice"},
		{"negative PCR", []byte(`{"version":1,"pcrs":[-1]}`), "cannot unmarshal number -1"},
		{"empty public", edit(func(j *sealedJSON) { j.Public = nil }), "public: empty"},
		{"empty private", edit(func(j *sealedJSON) { j.Private = nil }), "private: empty"},
		{"public not base64", []byte(`{"version":1,"pcrs":[4],"public":"!!"}`), "illegal base64"},
		{"short public", edit(func(j *sealedJSON) { j.Public = j.Public[:10] }), "public: not a TPM2B_PUBLIC"},
		{"public with trailing bytes", edit(func(j *sealedJSON) { j.Public = append(j.Public, 0) }), "public: not a TPM2B_PUBLIC: trailing data after byte"},
		{"public not an object", edit(func(j *sealedJSON) { j.Public = []byte{0, 2, 0xff, 0xff} }), "public: not a TPM2B_PUBLIC"},
		{"short private", edit(func(j *sealedJSON) { j.Private = j.Private[:10] }), "private: not a TPM2B_PRIVATE"},
		{"private with trailing bytes", edit(func(j *sealedJSON) { j.Private = append(j.Private, 0) }), "private: not a TPM2B_PRIVATE: trailing data after byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := UnmarshalSealed(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("UnmarshalSealed(%q) = %v, want an error containing %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestMarshalRejects(t *testing.T) {
	s, _ := sealedFor(t)
	s.PCRs = append(s.PCRs, 99)
	if _, err := s.Marshal(); err == nil || !strings.Contains(err.Error(), "pcrs: PCR 99 out of range") {
		t.Errorf("Marshal of a Sealed with PCR 99 = %v, want an error naming pcrs", err)
	}
}

// TestUnmarshalSealedVersion1 checks that a version 1 encoding, without
// values and SRK name, as the first release wrote it, still unseals.
func TestUnmarshalSealedVersion1(t *testing.T) {
	tp := newTPM(t, 1)
	s, err := tp.Seal(secret32, []uint{4, 7})
	if err != nil {
		t.Fatal(err)
	}
	v1, err := json.Marshal(sealedJSON{Version: 1, PCRs: s.PCRs, Public: s.Public, Private: s.Private})
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalSealed(v1)
	if err != nil {
		t.Fatalf("UnmarshalSealed(version 1) = %v", err)
	}
	if _, err := tp.Unseal(got); err != nil {
		t.Errorf("Unseal of a version 1 encoding = %v", err)
	}
}
