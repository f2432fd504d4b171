package backup

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/borough-os/borough/internal/pki"
)

// TestReadWrite writes a backup of a snapshot of several frames and reads
// it back with the owner's key; then tries what a restore must refuse
// before it touches a disk: another owner's key, a truncated file, a
// flipped byte, a file that is no backup.
func TestReadWrite(t *testing.T) {
	owner, other := newOwner(t), newOwner(t)
	snapshot := make([]byte, 2*frameSize+12345)
	rand.Read(snapshot)
	var file bytes.Buffer
	var reported int64
	meta, err := Write(&file, owner.TLS(), bytes.NewReader(snapshot), testMeta(t, 7), func(n int64) { reported = n })
	if err != nil {
		t.Fatal(err)
	}
	if reported != int64(len(snapshot)) || meta.SnapshotSize != int64(len(snapshot)) {
		t.Errorf("progress said %d, meta %d bytes; the snapshot has %d", reported, meta.SnapshotSize, len(snapshot))
	}
	good := file.Bytes()
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 1
	// The payload begins after the header's last line ("--- MAC") with a
	// 16-byte nonce; its first chunk holds the magic.
	early := bytes.Clone(good)
	early[payloadStart(t, good)+20] ^= 1
	cases := []struct {
		name string
		file []byte
		key  *pki.Cert
		want error
	}{
		{"the owner's", good, owner, nil},
		{"another owner's key", good, other, ErrOwner},
		{"truncated", good[:len(good)-100], owner, ErrDamaged},
		{"truncated in the snapshot", good[:len(good)/2], owner, ErrDamaged},
		{"a flipped byte", flipped, owner, ErrDamaged},
		{"a flipped byte in its first chunk", early, owner, ErrDamaged},
		{"no backup", []byte("SQLite format 3\x00 and so on"), owner, ErrNotBackup},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := Read(bytes.NewReader(tc.file), tc.key.TLS(), &out)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("Read = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), snapshot) || got.Cluster != "c1" || got.Revision != 7 || got.SnapshotSHA256 != meta.SnapshotSHA256 {
				t.Errorf("read back %d bytes, meta %+v", out.Len(), got)
			}
		})
	}
}

// TestSignature forges backups as whoever holds the owner's certificate
// (every enrolment config, etcd) could, and as a thief of another owner's
// key: each is encrypted to the owner, so only the signature tells it
// from the owner's own, and every reader refuses it.
func TestSignature(t *testing.T) {
	owner, forger := newOwner(t), newOwner(t)
	snapshot := []byte("a snapshot of the forger's choosing")
	meta := testMeta(t, 3)
	cases := []struct {
		name  string
		write func(w io.Writer) error
		want  error
	}{
		{"signed by another key", func(w io.Writer) error {
			return forge(w, owner.Cert, snapshot, meta, func(b []byte, m Meta) ([]byte, error) {
				return sign(b, m, forger.Cert, forger.Key)
			})
		}, ErrUnsigned},
		{"another backup's signature", func(w io.Writer) error {
			var real bytes.Buffer
			if _, err := Write(&real, owner.TLS(), bytes.NewReader([]byte("the owner's snapshot")), meta, nil); err != nil {
				return err
			}
			stmt := lastFrame(t, real.Bytes(), owner)
			return forge(w, owner.Cert, snapshot, meta, func([]byte, Meta) ([]byte, error) { return stmt, nil })
		}, ErrUnsigned},
		{"no signature", func(w io.Writer) error {
			return forge(w, owner.Cert, snapshot, meta, func([]byte, Meta) ([]byte, error) { return nil, nil })
		}, ErrUnsigned},
		{"an unsigned backup of an earlier release", func(w io.Writer) error {
			enc, err := encryptTo(w, owner.Cert)
			if err != nil {
				return err
			}
			io.WriteString(enc, magicV1)
			return enc.Close()
		}, ErrUnsigned},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var file bytes.Buffer
			if err := tc.write(&file); err != nil {
				t.Fatal(err)
			}
			if _, err := Read(bytes.NewReader(file.Bytes()), owner.TLS(), io.Discard); !errors.Is(err, tc.want) {
				t.Errorf("Read = %v, want %v", err, tc.want)
			}
			node, err := age.GenerateX25519Identity()
			if err != nil {
				t.Fatal(err)
			}
			var resealed bytes.Buffer
			if err := Reseal(&resealed, bytes.NewReader(file.Bytes()), owner.Key.(*ecdsa.PrivateKey), node.Recipient()); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(bytes.NewReader(resealed.Bytes()), node, owner.Cert, io.Discard); !errors.Is(err, tc.want) {
				t.Errorf("Open on the node = %v, want %v", err, tc.want)
			}
		})
	}
}

// forge writes a backup of snapshot encrypted to owner, as Write does,
// with the statement sign makes (nil: an empty one).
func forge(w io.Writer, owner *x509.Certificate, snapshot []byte, meta Meta, sign func([]byte, Meta) ([]byte, error)) error {
	enc, err := encryptTo(w, owner)
	if err != nil {
		return err
	}
	io.WriteString(enc, magic)
	writeFrame(enc, snapshot)
	writeFrame(enc, nil)
	sum := sha256.Sum256(snapshot)
	meta.SnapshotSHA256, meta.SnapshotSize, meta.Owner = hex.EncodeToString(sum[:]), int64(len(snapshot)), pki.CertPEM(owner)
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	stmt, err := sign(b, meta)
	if err != nil {
		return err
	}
	writeFrame(enc, b)
	writeFrame(enc, stmt)
	return enc.Close()
}

// encryptTo starts an age file encrypted to owner's key.
func encryptTo(w io.Writer, owner *x509.Certificate) (io.WriteCloser, error) {
	r, err := recipient(owner)
	if err != nil {
		return nil, err
	}
	return age.Encrypt(w, r)
}

// lastFrame is the owner's statement in the backup b.
func lastFrame(t *testing.T, b []byte, owner *pki.Cert) []byte {
	t.Helper()
	dec, err := decrypt(bytes.NewReader(b), identity{owner.Key.(*ecdsa.PrivateKey)}, ErrOwner)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(dec)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(plain[len(magic):])
	if _, err := readFrames(r, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(r, "meta"); err != nil {
		t.Fatal(err)
	}
	stmt, err := readFrame(r, "statement")
	if err != nil {
		t.Fatal(err)
	}
	return stmt
}

func newOwner(t *testing.T) *pki.Cert {
	t.Helper()
	o, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// testMeta is a backup's description of cluster c1 at rev, with a CA.
func testMeta(t *testing.T, rev int64) Meta {
	t.Helper()
	ca, err := pki.NewCA("c1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return Meta{Cluster: "c1", Revision: rev, CA: pki.CertPEM(ca.Cert), Taken: time.Now().UTC()}
}

// TestReseal: a backup resealed to a node's transfer key opens with that
// key only, and holds the same snapshot and description; a backup the
// owner's key does not open is not resealed.
func TestReseal(t *testing.T) {
	owner, other := newOwner(t), newOwner(t)
	node, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	snapshot := make([]byte, frameSize+999)
	rand.Read(snapshot)
	var file bytes.Buffer
	meta, err := Write(&file, owner.TLS(), bytes.NewReader(snapshot), testMeta(t, 9), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Reseal(io.Discard, bytes.NewReader(file.Bytes()), other.Key.(*ecdsa.PrivateKey), node.Recipient()); !errors.Is(err, ErrOwner) {
		t.Errorf("resealing with another owner's key = %v, want %v", err, ErrOwner)
	}
	var resealed bytes.Buffer
	if err := Reseal(&resealed, bytes.NewReader(file.Bytes()), owner.Key.(*ecdsa.PrivateKey), node.Recipient()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		id   age.Identity
		want error
	}{
		{"the node's transfer key", node, nil},
		{"another node's", stranger, ErrTransfer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := Open(bytes.NewReader(resealed.Bytes()), tc.id, owner.Cert, &out)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("Open = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || !bytes.Equal(out.Bytes(), snapshot) || got.SnapshotSHA256 != meta.SnapshotSHA256 || got.Revision != 9 {
				t.Errorf("Open = %d bytes, %+v, %v", out.Len(), got, err)
			}
		})
	}
}

// payloadStart is where the payload of the age file b begins: after its
// header's last line.
func payloadStart(t *testing.T, b []byte) int {
	t.Helper()
	mac := bytes.Index(b, []byte("\n--- "))
	if mac < 0 {
		t.Fatal("no age header")
	}
	return mac + 1 + bytes.IndexByte(b[mac+1:], '\n') + 1
}
