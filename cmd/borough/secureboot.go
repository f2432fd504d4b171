package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/secureboot"
)

func secureBootCommand() *cobra.Command {
	c := &cobra.Command{Use: "secureboot", Short: "The owner's Secure Boot keys"}
	var dir, name string
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Make the owner's Secure Boot keys (PK, KEK, db) and their signed enrolment updates",
		Long: `Init makes, in --dir (default: secureboot/ in the config directory):
  PK, KEK, db .key/.crt/.cer   RSA-2048 keys and self-signed certificates
  PK, KEK, db .auth            signed updates that enrol them in setup mode

Build an image with them (borough image build --secureboot DIR): its boot
binary is signed with the db key, and on the first boot of a machine whose
firmware is in setup mode the node enrols the keys and reboots into Secure
Boot. Keep the .key files offline; whoever has db.key can sign boot binaries
your machines will start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				dir = filepath.Join(configDir, "secureboot")
			}
			if err := secureboot.Init(dir, name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Secure Boot keys in %s; build with: borough image build --secureboot %s\n", dir, dir)
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", "", "directory for the keys (must not hold keys yet)")
	initCmd.Flags().StringVar(&name, "name", "owner", "the owner's name, in the certificates")
	c.AddCommand(initCmd)
	return c
}
