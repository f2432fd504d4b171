// Package versioned decodes the node's versioned JSON records (the node
// state record, the update record, the unlock key files, the escrow of a
// node's cluster unlock key): each carries its format's version, and a
// node reads only the version it writes, so that a record written by
// another Borough is refused by name, never misread. One decoder gives
// them one behaviour and one wording; each record's own checks (names,
// slots, sizes) stay with its package.
//
// The ESP's ledger is versioned too, but reads its version only after its
// MAC, which vouches for every field: it keeps its own order.
package versioned

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrDamaged says a record is not the JSON of its kind: torn by a power
// cut (a FAT rename is not atomic across one), or not a record at all.
var ErrDamaged = errors.New("damaged")

// VersionError says a record is of another version than the node reads.
type VersionError struct {
	Name      string
	Got, Want int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("%s has version %d, this node reads %d", e.Name, e.Got, e.Want)
}

// Decode decodes b, the record named name, into a T, whose version
// version returns, and checks it is want.
func Decode[T any](name string, b []byte, version func(*T) int, want int) (*T, error) {
	var r T
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, ErrDamaged, err)
	}
	if got := version(&r); got != want {
		return nil, &VersionError{Name: name, Got: got, Want: want}
	}
	return &r, nil
}
