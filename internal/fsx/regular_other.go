//go:build !unix

package fsx

import "os"

// openRegular checks the name with Lstat before and after opening it:
// there is no O_NOFOLLOW here.
func openRegular(name string, flag int, perm os.FileMode) (*os.File, error) {
	return openRegularLstat(name, flag, perm)
}
