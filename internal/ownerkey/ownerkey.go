// Package ownerkey keeps the owner's private key at rest, encrypted with a
// passphrase. The owner's key is the one key that speaks for every cluster
// its owner runs (it pins their CAs, mints tickets, removes nodes, sends
// updates and opens any node's disk from its owner escrow), so a copy of
// the owner's config directory, a backup or a laptop left open, must not
// be enough to use it. It is the owner's layer of the keys' map
// (docs/keys.md), on the owner's machine only.
//
// The encryption is age's passphrase mode (filippo.io/age: scrypt, then
// ChaCha20-Poly1305, ASCII-armored), a format other tools can open too, so
// that a person can recover the key without Borough; nothing here is
// hand-written cryptography.
package ownerkey

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"
)

// Environment variables that give the passphrase to a process without a
// terminal (CI, scripts): the passphrase itself, or a file holding it.
const (
	PassphraseEnv     = "BOROUGH_OWNER_PASSPHRASE"
	PassphraseFileEnv = "BOROUGH_OWNER_PASSPHRASE_FILE"
)

// MinPassphrase is the shortest passphrase Seal accepts.
const MinPassphrase = 8

// ErrWrongPassphrase says the passphrase does not open the key.
var ErrWrongPassphrase = errors.New("the passphrase does not open the owner key")

// Sealed says whether b is an encrypted key (as Seal writes it) rather
// than a PEM key in clear.
func Sealed(b []byte) bool { return bytes.HasPrefix(bytes.TrimSpace(b), []byte(armor.Header)) }

// Seal encrypts keyPEM with passphrase.
func Seal(keyPEM []byte, passphrase string) ([]byte, error) {
	if len(passphrase) < MinPassphrase {
		return nil, fmt.Errorf("the passphrase is shorter than %d characters", MinPassphrase)
	}
	r, err := age.NewScryptRecipient(passphrase)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	a := armor.NewWriter(&out)
	w, err := age.Encrypt(a, r)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(keyPEM); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := a.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Open decrypts what Seal wrote.
func Open(sealed []byte, passphrase string) ([]byte, error) {
	id, err := age.NewScryptIdentity(passphrase)
	if err != nil {
		return nil, err
	}
	r, err := age.Decrypt(armor.NewReader(bytes.NewReader(sealed)), id)
	var noMatch *age.NoIdentityMatchError
	switch {
	case errors.As(err, &noMatch):
		return nil, ErrWrongPassphrase
	case err != nil:
		return nil, fmt.Errorf("not an encrypted owner key: %w", err)
	}
	keyPEM, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("the encrypted owner key is damaged: %w", err)
	}
	return keyPEM, nil
}

// FromEnv returns the passphrase the environment gives, if it gives one.
func FromEnv() (string, bool, error) {
	if p, ok := os.LookupEnv(PassphraseEnv); ok {
		return p, true, nil
	}
	path, ok := os.LookupEnv(PassphraseFileEnv)
	if !ok {
		return "", false, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", PassphraseFileEnv, err)
	}
	return strings.TrimRight(string(b), "\r\n"), true, nil
}
