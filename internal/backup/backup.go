// Package backup writes and reads a cluster's backup: an etcd snapshot
// and what a restore needs besides (the cluster's name, its CA with the
// CA's key, the CRL in force, the owner), in one file that only the
// owner's key opens and only the owner's key signs.
//
// The file is an age file (filippo.io/age), encrypted to the owner's
// ECDSA P-256 key as age's tagged P-256 recipient (age's `tag` package,
// HPKE DHKEM(P-256)), so that the format, its streaming encryption and
// its detection of truncation and tampering are age's, not Borough's.
// age ships the recipient but no identity for it (hardware plugins hold
// those keys); identity here is that identity for an owner key held in
// software, a dozen lines of HPKE. Inside, in order:
//
//	"borough backup v2\n"
//	the snapshot, in frames of a big-endian uint32 length and that many
//	bytes, ended by a frame of length 0
//	a frame of the Meta, JSON
//	a frame of the owner's statement on it (authority.KindBackup)
//
// The Meta comes after the snapshot because it carries the snapshot's
// SHA-256 and size, known only once the snapshot has streamed through: a
// backup of a large database never waits for, or keeps, a plaintext
// copy. Encryption alone says nothing of who wrote a backup: the owner's
// certificate, to which it is encrypted, is in every enrolment config and
// in etcd. So the owner signs the Meta's digest, and every reader (the
// owner's verify-backup, a restore's config, the restoring node) refuses
// a backup the owner did not sign, with a CA key and data of someone
// else's choosing. v1 backups, made before they were signed, are refused
// so too (ErrUnsigned).
package backup

import (
	"bufio"
	"crypto"
	"crypto/ecdsa"
	"crypto/hpke"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"filippo.io/age"
	"filippo.io/age/tag"

	"github.com/borough-os/borough/internal/pki"
)

// magic starts every backup's plaintext; magicV1 an unsigned backup of
// an earlier release.
const (
	magic   = "borough backup v2\n"
	magicV1 = "borough backup v1\n"
)

// frameSize is the largest snapshot frame Write writes; Read accepts
// frames up to maxFrame.
const (
	frameSize = 1 << 20
	maxFrame  = 16 << 20
)

// Meta is what a restore needs besides the snapshot, and what the backup
// says of itself.
type Meta struct {
	Cluster string    `json:"cluster"`
	Taken   time.Time `json:"taken"`
	// Revision is etcd's revision when the snapshot began.
	Revision int64 `json:"revision"`
	// CA and CAKey are the cluster CA, PEM; CRL the revocations in
	// force, DER.
	CA    []byte `json:"ca"`
	CAKey []byte `json:"ca_key"`
	CRL   []byte `json:"crl,omitempty"`
	// Owner is the owner certificate the backup is encrypted to, PEM.
	Owner []byte `json:"owner"`
	// SnapshotSHA256 and SnapshotSize are the snapshot's, which Read
	// checks.
	SnapshotSHA256 string `json:"snapshot_sha256"`
	SnapshotSize   int64  `json:"snapshot_size"`
}

// Errors of Read, wrapped with the details.
var (
	ErrNotBackup = errors.New("not a Borough backup")
	ErrOwner     = errors.New("the backup is not encrypted to this owner's key")
	ErrTransfer  = errors.New("the backup is not encrypted to this node's transfer key")
	ErrDamaged   = errors.New("the backup is damaged or truncated")
	ErrUnsigned  = errors.New("the backup is not signed by the owner's key")
)

// Write writes a backup of snapshot, with meta, encrypted to and signed
// by the owner (its certificate and key), to w, calling progress with the
// snapshot bytes written so far after each frame. It returns meta with
// the snapshot's checksum and size.
func Write(w io.Writer, owner tls.Certificate, snapshot io.Reader, meta Meta, progress func(int64)) (Meta, error) {
	cert, key, err := ownerOf(owner)
	if err != nil {
		return meta, err
	}
	r, err := recipient(cert)
	if err != nil {
		return meta, err
	}
	enc, err := age.Encrypt(w, r)
	if err != nil {
		return meta, fmt.Errorf("encrypting the backup: %w", err)
	}
	if _, err := io.WriteString(enc, magic); err != nil {
		return meta, err
	}
	sum := sha256.New()
	buf := make([]byte, frameSize)
	for {
		n, rerr := io.ReadFull(snapshot, buf)
		if n > 0 {
			if err := writeFrame(enc, buf[:n]); err != nil {
				return meta, err
			}
			sum.Write(buf[:n])
			meta.SnapshotSize += int64(n)
			if progress != nil {
				progress(meta.SnapshotSize)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return meta, fmt.Errorf("reading the snapshot: %w", rerr)
		}
	}
	if err := writeFrame(enc, nil); err != nil {
		return meta, err
	}
	meta.SnapshotSHA256 = hex.EncodeToString(sum.Sum(nil))
	meta.Owner = pki.CertPEM(cert)
	if err := writeMeta(enc, meta, cert, key); err != nil {
		return meta, err
	}
	if err := enc.Close(); err != nil {
		return meta, fmt.Errorf("encrypting the backup: %w", err)
	}
	return meta, nil
}

// ownerOf is the owner's certificate and signing key.
func ownerOf(owner tls.Certificate) (*x509.Certificate, crypto.Signer, error) {
	cert := owner.Leaf
	if cert == nil {
		if len(owner.Certificate) == 0 {
			return nil, nil, errors.New("the owner's key pair has no certificate")
		}
		var err error
		if cert, err = x509.ParseCertificate(owner.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("the owner's certificate: %w", err)
		}
	}
	key, ok := owner.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("the owner's key is a %T, which cannot sign", owner.PrivateKey)
	}
	return cert, key, nil
}

// writeMeta writes meta's frame and the owner's statement on it.
func writeMeta(w io.Writer, meta Meta, cert *x509.Certificate, key crypto.Signer) error {
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	stmt, err := sign(b, meta, cert, key)
	if err != nil {
		return err
	}
	if err := writeFrame(w, b); err != nil {
		return err
	}
	return writeFrame(w, stmt)
}

func writeFrame(w io.Writer, b []byte) error {
	if err := binary.Write(w, binary.BigEndian, uint32(len(b))); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// Read decrypts the backup in r with the owner's key, writes its snapshot
// to snapshot, checks it against the backup's checksum and returns the
// backup's Meta. What it wrote is the snapshot only if it returns no
// error: a caller writes it where nothing reads it before then.
func Read(r io.Reader, owner tls.Certificate, snapshot io.Writer) (Meta, error) {
	cert, key, err := ownerOf(owner)
	if err != nil {
		return Meta{}, err
	}
	ecKey, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return Meta{}, fmt.Errorf("the owner's key is a %T: backups are encrypted to ECDSA P-256 keys", key)
	}
	dec, err := decrypt(r, identity{ecKey}, ErrOwner)
	if err != nil {
		return Meta{}, err
	}
	return read(dec, cert, snapshot)
}

// Open is Read of a backup on its way to the node that restores it,
// resealed to that node's transfer key (Reseal), and signed by owner.
func Open(r io.Reader, transfer age.Identity, owner *x509.Certificate, snapshot io.Writer) (Meta, error) {
	dec, err := decrypt(r, transfer, ErrTransfer)
	if err != nil {
		return Meta{}, err
	}
	return read(dec, owner, snapshot)
}

// Reseal decrypts the backup in r with the owner's key and encrypts what
// it holds, unchanged, to the transfer key to, writing it to w: the node
// that restores a backup holds no key of the owner's. It checks nothing
// within; the node does as it reads it (Open).
func Reseal(w io.Writer, r io.Reader, key *ecdsa.PrivateKey, to age.Recipient) error {
	dec, err := decrypt(r, identity{key}, ErrOwner)
	if err != nil {
		return err
	}
	enc, err := age.Encrypt(w, to)
	if err != nil {
		return fmt.Errorf("encrypting the backup to the node: %w", err)
	}
	if _, err := io.Copy(enc, dec); err != nil {
		return fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	return enc.Close()
}

// decrypt opens the age file in r with id; wrongKey says what an
// identity that does not open it means.
func decrypt(r io.Reader, id age.Identity, wrongKey error) (io.Reader, error) {
	dec, err := age.Decrypt(r, id)
	switch {
	case errors.Is(err, age.ErrIncorrectIdentity):
		return nil, fmt.Errorf("%w: %w", wrongKey, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrNotBackup, err)
	}
	return dec, nil
}

// read reads the decrypted backup in dec, which owner must have signed
// (Read).
func read(dec io.Reader, owner *x509.Certificate, snapshot io.Writer) (Meta, error) {
	var meta Meta
	br := bufio.NewReader(dec)
	head := make([]byte, len(magic))
	if _, err := io.ReadFull(br, head); err != nil {
		return meta, fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	switch string(head) {
	case magic:
	case magicV1:
		return meta, fmt.Errorf("%w: it is a backup of an earlier release, made before backups were signed; "+
			"take a new one with borough cluster backup", ErrUnsigned)
	default:
		return meta, fmt.Errorf("%w: it does not begin %q", ErrNotBackup, magic[:len(magic)-1])
	}
	sum := sha256.New()
	size, err := readFrames(br, io.MultiWriter(snapshot, sum))
	if err != nil {
		return meta, err
	}
	if meta, err = readMeta(br, owner); err != nil {
		return meta, err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != meta.SnapshotSHA256 || size != meta.SnapshotSize {
		return meta, fmt.Errorf("%w: the snapshot has %d bytes with SHA-256 %s; the backup says %d, %s",
			ErrDamaged, size, got, meta.SnapshotSize, meta.SnapshotSHA256)
	}
	return meta, nil
}

// readMeta reads the Meta's frame and the statement on it, and checks
// that owner signed it.
func readMeta(r io.Reader, owner *x509.Certificate) (Meta, error) {
	var meta Meta
	b, err := readFrame(r, "its description")
	if err != nil {
		return meta, err
	}
	stmt, err := readFrame(r, "its signature")
	if err != nil {
		return meta, err
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return meta, fmt.Errorf("%w: its description: %w", ErrDamaged, err)
	}
	return meta, checkSignature(stmt, b, meta, owner)
}

// readFrame reads one frame, what.
func readFrame(r io.Reader, what string) ([]byte, error) {
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDamaged, what, err)
	}
	if n > maxFrame {
		return nil, fmt.Errorf("%w: %s has %d bytes", ErrDamaged, what, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDamaged, what, err)
	}
	return b, nil
}

// readFrames copies the snapshot's frames to w and returns its size.
func readFrames(r io.Reader, w io.Writer) (int64, error) {
	var size int64
	for {
		var n uint32
		if err := binary.Read(r, binary.BigEndian, &n); err != nil {
			return size, fmt.Errorf("%w: after %d snapshot bytes: %w", ErrDamaged, size, err)
		}
		if n == 0 {
			return size, nil
		}
		if n > maxFrame {
			return size, fmt.Errorf("%w: a snapshot frame of %d bytes", ErrDamaged, n)
		}
		copied, err := io.CopyN(w, r, int64(n))
		size += copied
		if err != nil {
			return size, fmt.Errorf("%w: after %d snapshot bytes: %w", ErrDamaged, size, err)
		}
	}
}

// recipient is age's tagged P-256 recipient of owner's key.
func recipient(owner *x509.Certificate) (*tag.Recipient, error) {
	pub, ok := owner.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("the owner certificate %s has a %T key: a backup is encrypted to an ECDSA P-256 key", pki.Fingerprint(owner), owner.PublicKey)
	}
	k, err := pub.ECDH()
	if err != nil {
		return nil, fmt.Errorf("the owner certificate %s: %w", pki.Fingerprint(owner), err)
	}
	b := k.Bytes() // 0x04, X, Y
	compressed := append([]byte{0x02 | b[64]&1}, b[1:33]...)
	return tag.NewClassicRecipient(compressed)
}

// p256Label is the HPKE info of age's tagged P-256 recipient stanzas
// (filippo.io/age/tag).
const p256Label = "age-encryption.org/p256tag"

// identity opens what is encrypted to an owner's key as age's tagged
// P-256 recipient.
type identity struct{ key *ecdsa.PrivateKey }

var _ age.Identity = identity{}

// Unwrap returns the file key from the stanza encrypted to i, or an error
// wrapping age.ErrIncorrectIdentity if none is.
func (i identity) Unwrap(stanzas []*age.Stanza) ([]byte, error) {
	k, err := i.key.ECDH()
	if err != nil {
		return nil, err
	}
	sk, err := hpke.NewDHKEMPrivateKey(k)
	if err != nil {
		return nil, err
	}
	for _, s := range stanzas {
		if s.Type != "p256tag" || len(s.Args) != 2 {
			continue
		}
		enc, err := base64.RawStdEncoding.Strict().DecodeString(s.Args[1])
		if err != nil {
			continue
		}
		r, err := hpke.NewRecipient(enc, sk, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), []byte(p256Label))
		if err != nil {
			continue
		}
		if fileKey, err := r.Open(nil, s.Body); err == nil {
			return fileKey, nil
		}
	}
	return nil, fmt.Errorf("%w: no p256tag stanza opens with it", age.ErrIncorrectIdentity)
}
