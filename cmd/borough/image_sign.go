package main

import (
	"crypto"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/image"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/uki"
	"github.com/borough-os/borough/internal/update"
)

func imageSignCommand() *cobra.Command {
	var downgrade bool
	c := &cobra.Command{
		Use:   "sign IMAGE",
		Short: "Sign the version in a disk image with the owner's key, so that the owner's nodes take it as an update",
		Long: `sign writes, on the ESP of IMAGE, the owner's signed statement of the
version its boot binary and node payload are (` + string(esp.ReleaseStatement) + `). A node
takes an update only with that statement, signed by the owner it was
enrolled with, and for exactly that boot binary and payload; a version not
newer than the one it runs only if the statement says --downgrade.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return signImage(cmd.OutOrStdout(), args[0], downgrade)
		},
	}
	c.Flags().BoolVar(&downgrade, "downgrade", false, "let it onto nodes that run its version or a newer one")
	return c
}

// signImage signs the release in image with the owner's key.
func signImage(stdout io.Writer, img string, downgrade bool) error {
	boot, payload, err := readRelease(img)
	if err != nil {
		return err
	}
	kp, err := ownerKeyPair()
	if err != nil {
		return err
	}
	statement, err := update.SignRelease(kp.Leaf, kp.PrivateKey.(crypto.Signer), boot, payload, downgrade)
	if err != nil {
		return fmt.Errorf("signing %s: %w", img, err)
	}
	if err := image.WriteESPFile(img, esp.ReleaseStatement, statement); err != nil {
		return err
	}
	version, err := uki.VersionOf(boot)
	if err != nil {
		return err
	}
	how := ""
	if downgrade {
		how = ", downgrade allowed"
	}
	fmt.Fprintf(stdout, "signed version %s of %s as owner %s%s\n", version, img, pki.Fingerprint(kp.Leaf), how)
	return nil
}
