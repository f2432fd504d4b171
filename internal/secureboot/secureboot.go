// Package secureboot gives a Borough owner Secure Boot of their own: it
// makes the owner's platform key (PK), key exchange key (KEK) and
// signature database key (db), signs boot binaries with the db key, and
// enrols the keys into a machine whose firmware is in setup mode.
//
// With Secure Boot on, the firmware starts only boot binaries signed by a
// key in db, and PCR 7 records that it did, so the TPM-sealed unlock keys
// open only in a boot the owner's key vouched for. The owner's own keys,
// not a vendor's, mean that nothing else (not another distribution's
// shim) passes.
//
// Signing and the signed variable updates are done by Debian's sbsigntool
// (sbsign) and efitools (cert-to-efi-sig-list, sign-efi-sig-list): they
// are what Debian itself signs with, and Go has no Authenticode or
// PKCS#7 signer among the libraries this project uses. Keys and
// certificates are made here, in Go.
//
// Enrolment: Init writes, besides the keys, db.auth, KEK.auth and PK.auth,
// each a time-based authenticated variable update (db signed by the KEK,
// KEK and PK by the PK). A firmware in setup mode (no PK; most have a
// "clear keys" or "reset to setup mode" item) accepts them: the image
// builder puts them on the ESP, and the node enrols them on its first
// boot (Enrol), db and KEK first, the PK last, which ends setup mode;
// then it reboots into Secure Boot. Only on its first boot, before it has
// sealed anything: a node found in setup mode later had its keys cleared
// by someone, and boots with Secure Boot off, so its keys stay sealed
// (PCR 7) until the owner looks. A firmware setup menu that enrols
// keys from files takes the same .auth files, or the .cer certificates.
package secureboot

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/borough-os/borough/internal/atomicfile"
)

// The keys, in the order Enrol writes them: the PK last, as writing it
// ends setup mode.
var keyNames = []string{"db", "KEK", "PK"}

// signer names, for each key, the key that signs its variable update.
var signer = map[string]string{"db": "KEK", "KEK": "PK", "PK": "PK"}

// ownerFile holds the owner's GUID, recorded in each signature list.
const ownerFile = "owner.guid"

// validity is how long the certificates are valid. UEFI firmware does
// not check it (it has no trusted clock); it is long so that tools that
// do are not surprised.
const validity = 30 * 365 * 24 * time.Hour

// Init makes a new set of keys for owner in dir, which must not hold keys
// yet, and the signed updates that enrol them.
func Init(dir, owner string) error {
	if _, err := os.Stat(filepath.Join(dir, "PK.key")); err == nil {
		return fmt.Errorf("%s already holds Secure Boot keys; refusing to replace them", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	guid := uuid.New().String()
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(guid+"\n"), 0o644); err != nil {
		return err
	}
	for _, name := range keyNames {
		if err := makeKey(dir, name, owner); err != nil {
			return fmt.Errorf("making the %s: %w", name, err)
		}
	}
	for _, name := range keyNames {
		if err := signedUpdate(dir, name, guid); err != nil {
			return fmt.Errorf("signing the %s update: %w", name, err)
		}
	}
	return nil
}

// makeKey writes NAME.key, NAME.crt (PEM) and NAME.cer (DER): an RSA-2048
// key, the size every UEFI firmware verifies, and a self-signed
// certificate for it.
func makeKey(dir, name, owner string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: owner + " Secure Boot " + name, Organization: []string{"Borough"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	base := filepath.Join(dir, name)
	return atomicfile.WriteAll(
		atomicfile.File{Path: base + ".key", Data: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), Perm: 0o600},
		atomicfile.File{Path: base + ".crt", Data: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Perm: 0o644},
		atomicfile.File{Path: base + ".cer", Data: der, Perm: 0o644},
	)
}

// signedUpdate writes NAME.esl, the certificate as an EFI signature list,
// and NAME.auth, the list as an authenticated update of variable NAME.
func signedUpdate(dir, name, guid string) error {
	base := filepath.Join(dir, name)
	by := filepath.Join(dir, signer[name])
	if err := run("cert-to-efi-sig-list", "-g", guid, base+".crt", base+".esl"); err != nil {
		return err
	}
	return run("sign-efi-sig-list", "-g", guid, "-k", by+".key", "-c", by+".crt", name, base+".esl", base+".auth")
}

// Sign returns binary signed with the db key in dir, as the firmware
// checks it (an Authenticode signature).
func Sign(binary []byte, dir string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "borough-sign-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	in, out := filepath.Join(tmp, "unsigned.efi"), filepath.Join(tmp, "signed.efi")
	if err := os.WriteFile(in, binary, 0o600); err != nil {
		return nil, err
	}
	db := filepath.Join(dir, "db")
	if err := run("sbsign", "--key", db+".key", "--cert", db+".crt", "--output", out, in); err != nil {
		return nil, fmt.Errorf("signing the boot binary: %w", err)
	}
	return os.ReadFile(out)
}

// Updates returns the signed updates in dir by key name, for the ESP.
func Updates(dir string) (map[string][]byte, error) {
	out := make(map[string][]byte)
	for _, name := range keyNames {
		b, err := os.ReadFile(filepath.Join(dir, name+".auth"))
		if err != nil {
			return nil, fmt.Errorf("Secure Boot keys in %s (borough secureboot init): %w", dir, err)
		}
		out[name] = b
	}
	return out, nil
}

// run runs a signing tool, with its output in the error.
func run(tool string, args ...string) error {
	out, err := exec.Command(tool, args...).CombinedOutput()
	var missing *exec.Error
	if errors.As(err, &missing) {
		return fmt.Errorf("%s not found: apt-get install sbsigntool efitools", tool)
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %s", tool, err, out)
	}
	return nil
}
