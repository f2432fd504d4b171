package main

import (
	"fmt"
	"io"
	"os"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/spf13/cobra"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/partition"
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

func enrolImage(stdout io.Writer, image, config string) error {
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
	if err := writeESPFile(image, esp.EnrolmentConfig, b); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s to the ESP of %s\n", esp.EnrolmentConfig, image)
	return nil
}

// writeESPFile writes b as f into the ESP of a disk image (or disk),
// without mounting it.
func writeESPFile(image string, f esp.File, b []byte) error {
	index, _, err := findPartition(image, partition.ESPType)
	if err != nil {
		return err
	}
	d, err := diskfs.Open(image, diskfs.WithOpenMode(diskfs.ReadWrite))
	if err != nil {
		return fmt.Errorf("opening %s: %w", image, err)
	}
	defer d.Close()
	fs, err := d.GetFilesystem(index)
	if err != nil {
		return fmt.Errorf("reading the ESP of %s: %w", image, err)
	}
	file, err := fs.OpenFile("/"+string(f), os.O_CREATE|os.O_RDWR|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("creating %s on the ESP: %w", f, err)
	}
	if _, err := file.Write(b); err != nil {
		file.Close()
		return fmt.Errorf("writing %s on the ESP: %w", f, err)
	}
	return file.Close()
}
