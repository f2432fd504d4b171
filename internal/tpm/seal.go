package tpm

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/google/go-tpm/tpm2"
)

// maxSecret is MAX_SYM_DATA, the largest secret a sealed data object can
// hold.
const maxSecret = 128

// Seal seals secret (1 to 128 bytes) to the current SHA-256 values of pcrs:
// Unseal returns it only while those PCRs hold the same values, on this
// TPM, until the TPM is cleared.
func (t *TPM) Seal(secret []byte, pcrs []uint) (*Sealed, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	values, err := t.pcrs(pcrs)
	if err != nil {
		return nil, fmt.Errorf("sealing: %w", err)
	}
	return t.sealTo(secret, values, 0)
}

// SealTo is Seal with given SHA-256 PCR values instead of the current ones,
// typically values predicted for the next boot (see the package doc), and
// to epoch, the value the epoch counter must hold (Epoch), unless it is 0.
// The keys of values are the PCRs sealed to; each value must be 32 bytes.
func (t *TPM) SealTo(secret []byte, values map[uint][]byte, epoch uint64) (*Sealed, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sealTo(secret, values, epoch)
}

// sealTo is SealTo for a caller that holds t.mu.
func (t *TPM) sealTo(secret []byte, values map[uint][]byte, epoch uint64) (*Sealed, error) {
	s, err := t.seal(secret, values, epoch)
	if err != nil {
		return nil, fmt.Errorf("sealing: %w", err)
	}
	return s, nil
}

// seal implements SealTo; its named err collects flush errors.
func (t *TPM) seal(secret []byte, values map[uint][]byte, epoch uint64) (_ *Sealed, err error) {
	if len(secret) == 0 {
		return nil, errors.New("empty secret")
	}
	if len(secret) > maxSecret {
		return nil, fmt.Errorf("secret is %d bytes, at most %d allowed", len(secret), maxSecret)
	}
	// Sorted, as policyDigest needs them and as they are stored.
	pcrs := slices.Sorted(maps.Keys(values))
	if err := checkPCRs(pcrs); err != nil {
		return nil, err
	}
	for _, pcr := range pcrs {
		if len(values[pcr]) != sha256.Size {
			return nil, fmt.Errorf("PCR %d value is %d bytes, want %d", pcr, len(values[pcr]), sha256.Size)
		}
	}
	var counter *tpm2.TPM2BName
	if epoch != 0 {
		name, _, err := t.counterName(EpochCounter)
		if err != nil {
			return nil, err
		}
		counter = &name
	}
	policy, err := policyDigest(pcrs, values, counter, epoch)
	if err != nil {
		return nil, err
	}

	srk, err := t.loadedSRK()
	if err != nil {
		return nil, err
	}
	rsp, err := tpm2.Create{
		// The session is salted to the SRK and encrypts InSensitive, the
		// first parameter, so the secret crosses the bus encrypted with a
		// key only the TPM and this process know. The SRK's own auth
		// value is empty.
		ParentHandle: tpm2.AuthHandle{
			Handle: srk.handle,
			Name:   srk.name,
			Auth: tpm2.HMAC(tpm2.TPMAlgSHA256, 16,
				tpm2.Salted(srk.handle, srk.public),
				tpm2.AESEncryption(128, tpm2.EncryptIn)),
		},
		InSensitive: tpm2.TPM2BSensitiveCreate{
			Sensitive: &tpm2.TPMSSensitiveCreate{
				Data: tpm2.NewTPMUSensitiveCreate(&tpm2.TPM2BSensitiveData{Buffer: secret}),
			},
		},
		InPublic: tpm2.New2B(sealedTemplate(policy)),
	}.Execute(t.t)
	if err != nil {
		return nil, fmt.Errorf("creating sealed object: %w", err)
	}
	return &Sealed{
		Epoch:   epoch,
		PCRs:    pcrs,
		Values:  maps.Clone(values),
		SRKName: srk.name.Buffer,
		Public:  tpm2.Marshal(rsp.OutPublic),
		Private: tpm2.Marshal(rsp.OutPrivate),
	}, nil
}

// sealedTemplate is the public area of a sealed data object (a keyed hash
// object without a scheme) that only a session satisfying policy can
// unseal.
func sealedTemplate(policy []byte) tpm2.TPMTPublic {
	return tpm2.TPMTPublic{
		Type:    tpm2.TPMAlgKeyedHash,
		NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{
			// Bound to this TPM and the SRK: TPM2_Duplicate cannot copy
			// it out.
			FixedTPM:    true,
			FixedParent: true,
			// Unseal only through the PCR policy, never with the
			// (empty) auth value; the same for admin actions such as
			// TPM2_ObjectChangeAuth.
			UserWithAuth:    false,
			AdminWithPolicy: true,
			// A policy failure after a boot change must not count
			// towards the TPM's dictionary-attack lockout.
			NoDA: true,
		},
		AuthPolicy: tpm2.TPM2BDigest{Buffer: policy},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgKeyedHash,
			&tpm2.TPMSKeyedHashParms{
				Scheme: tpm2.TPMTKeyedHashScheme{Scheme: tpm2.TPMAlgNull},
			}),
	}
}
