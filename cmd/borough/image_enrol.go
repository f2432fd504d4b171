package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/image"
	"github.com/borough-os/borough/internal/enrolment"
)

func imageEnrolCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "enrol IMAGE CONFIG",
		Short: "Write an enrolment config into the ESP of a disk image (or disk), without mounting it",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return enrolImage(cmd.OutOrStdout(), args[0], args[1])
		},
	}
}

func enrolImage(stdout io.Writer, img, config string) error {
	b, err := os.ReadFile(config)
	if err != nil {
		return err
	}
	e, err := enrolment.Parse(b, config, time.Now())
	if err != nil {
		return err
	}
	if err := checkTicketLife(e, time.Now()); err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	if err := image.WriteESPFile(img, esp.EnrolmentConfig, b); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s to the ESP of %s\n", esp.EnrolmentConfig, img)
	return nil
}
