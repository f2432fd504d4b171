package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"

	"golang.org/x/term"

	"github.com/borough-os/borough/internal/ownerkey"
)

// errNoPassphrase is a passphrase needed where nothing can give one.
var errNoPassphrase = fmt.Errorf("the owner key is encrypted: run from a terminal, or set %s or %s",
	ownerkey.PassphraseEnv, ownerkey.PassphraseFileEnv)

// passphrase is the owner key's passphrase, from the environment or the
// terminal.
func passphrase(prompt string) (string, error) {
	if p, ok, err := ownerkey.FromEnv(); ok || err != nil {
		return p, err
	}
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", errNoPassphrase
	}
	fmt.Fprint(os.Stderr, prompt)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(os.Stderr)
	return string(b), err
}

// newPassphrase asks for a new passphrase, twice on a terminal.
func newPassphrase() (string, error) {
	if p, ok, err := ownerkey.FromEnv(); ok || err != nil {
		return p, err
	}
	p, err := passphrase("new passphrase for the owner key: ")
	if err != nil {
		return "", err
	}
	again, err := passphrase("the same again: ")
	if err != nil {
		return "", err
	}
	if p != again {
		return "", errors.New("the two passphrases differ")
	}
	return p, nil
}

// readOwnerKey reads an owner key file, decrypting it if it is encrypted;
// for the config directory's, from where an older Borough kept it in
// clear if that is all there is (with a warning).
func readOwnerKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && path == ownerKeyPath() {
		if clear, cerr := os.ReadFile(clearKeyPath()); cerr == nil {
			fmt.Fprintf(os.Stderr, "warning: the owner key %s is kept in clear: `borough owner encrypt` encrypts it\n", clearKeyPath())
			return clear, nil
		}
		return nil, fmt.Errorf("no owner key at %s: run `borough owner init` first", path)
	}
	if err != nil {
		return nil, err
	}
	if !ownerkey.Sealed(b) {
		return b, nil
	}
	p, err := passphrase("passphrase of the owner key " + path + ": ")
	if err != nil {
		return nil, err
	}
	keyPEM, err := ownerkey.Open(b, p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keyPEM, nil
}

// unlocked is the owner's identity once decrypted, by config directory:
// one command asks for the passphrase once.
var unlocked = map[string]tls.Certificate{}

func ownerKeyPair() (tls.Certificate, error) {
	if kp, ok := unlocked[configDir]; ok {
		return kp, nil
	}
	if _, err := os.Stat(ownerCertPath()); err != nil {
		return tls.Certificate{}, fmt.Errorf("loading the owner's identity (borough owner init): %w", err)
	}
	kp, err := loadPair(ownerCertPath(), ownerKeyPath())
	if err != nil {
		return kp, err
	}
	unlocked[configDir] = kp
	return kp, nil
}
