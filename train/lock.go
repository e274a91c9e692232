package train

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"ferry/internal/fsx"
)

// One writer per checkpoint directory.
//
// Lock takes an advisory flock(2) on D/.lock and writes this process's pid
// into it for people (and for the error a second run prints). The kernel
// drops a flock when its holder dies, however it dies, so a lock is never
// stale: a run after a kill -9 takes it over without asking anyone. The pid
// in the file is informational only.
//
// Unlock removes the lock file while still holding it. A process that
// opened the old file just before that may then lock an unlinked inode, so
// Lock checks, after flock succeeds, that the path still names the inode it
// locked, and retries otherwise.

const lockFile = ".lock"

// ErrDirInUse is wrapped by Lock's error when another live process holds
// the directory.
var ErrDirInUse = errors.New("checkpoint directory in use")

// Lock makes this process the only writer of c.Dir until unlock is called
// (or the process ends). It creates c.Dir if needed, checks that it is
// writable (CheckWritable) and fails at once, without waiting, when another
// ferry run holds it. unlock removes the lock file, and c.Dir too when Lock
// created it and nothing else was written there, so that a run that fails
// before its first checkpoint leaves no empty directory behind.
//
// The training loop calls Lock once, before it resumes or trains, and
// defers unlock.
func (c *Checkpointer) Lock() (unlock func(), err error) {
	if c.Dir == "" {
		return nil, errors.New("checkpoint: no directory given")
	}
	created := false
	if _, err := os.Stat(c.Dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("checkpoint directory %s cannot be created: %w (give a --checkpoint-dir you can write to)", c.Dir, err)
		}
		created = true
	}
	undo := func() {
		if created {
			os.Remove(c.Dir) // only if still empty
		}
	}
	if err := c.CheckWritable(); err != nil {
		undo()
		return nil, err
	}
	path := filepath.Join(c.Dir, lockFile)
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			undo()
			return nil, fmt.Errorf("checkpoint directory %s: %w", c.Dir, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				pid := strings.TrimSpace(string(b[:n]))
				if _, perr := strconv.Atoi(pid); perr != nil {
					pid = "unknown"
				}
				return nil, fmt.Errorf("%w: checkpoint directory %s is in use by another ferry run (pid %s); "+
					"wait for it to end, or give another --checkpoint-dir", ErrDirInUse, c.Dir, pid)
			}
			undo()
			return nil, fmt.Errorf("checkpoint directory %s: locking %s: %w", c.Dir, lockFile, err)
		}
		// The path must still name the file we locked (see above).
		var held, now syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &held) != nil || syscall.Stat(path, &now) != nil ||
			held.Ino != now.Ino || held.Dev != now.Dev {
			f.Close()
			if attempt < 20 {
				continue
			}
			return nil, fmt.Errorf("checkpoint directory %s: its lock file keeps changing; is another ferry run starting?", c.Dir)
		}
		f.Truncate(0)
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		c.mu.Lock()
		c.locked = true
		c.mu.Unlock()
		var once sync.Once
		unlock := func() {
			once.Do(func() {
				c.mu.Lock()
				c.locked = false
				c.mu.Unlock()
				os.Remove(path)
				f.Close()
				if created {
					os.Remove(c.Dir) // fails, as it should, once it holds checkpoints
				}
			})
		}
		key := new(int)
		temporaries.Lock()
		if temporaries.locks == nil {
			temporaries.locks = map[*int]func(){}
		}
		temporaries.locks[key] = unlock
		temporaries.Unlock()
		return func() {
			unlock()
			temporaries.Lock()
			delete(temporaries.locks, key)
			temporaries.Unlock()
		}, nil
	}
}

// CheckWritable fails when c.Dir cannot take a checkpoint: it is missing
// and cannot be made, is not a directory, or refuses a new file (read-only,
// wrong owner, read-only file system). The loop calls it (Lock does) before
// the first step, so a run does not train for an hour and then fail to save.
func (c *Checkpointer) CheckWritable() error {
	st, err := os.Stat(c.Dir)
	if err != nil {
		return fmt.Errorf("checkpoint directory %s: %w (give a --checkpoint-dir you can write to)", c.Dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("--checkpoint-dir %s is not a directory; give a directory (it is created if missing)", c.Dir)
	}
	if err := fsx.ProbeWritable(c.Dir); err != nil {
		return fmt.Errorf("checkpoint directory: %w; give a --checkpoint-dir you can write to", err)
	}
	return nil
}

// This process's temporary checkpoint files and directories, and the
// unlock functions of the directories it holds, so that an abrupt exit
// (a second Ctrl-C, SIGQUIT) can remove them first. Creating one and
// renaming it into place both hold the mutex, so RemoveTemporaries never
// sees half a rename, and none is created after it ran.
var temporaries struct {
	sync.Mutex
	paths  map[string]bool
	locks  map[*int]func()
	closed bool
}

// errShuttingDown is returned by a Save that starts after
// RemoveTemporaries.
var errShuttingDown = errors.New("the process is exiting; nothing was written")

// createTemp makes a temporary directory (dir true) or file in parent,
// named prefix + random, and registers it.
func createTemp(parent, prefix string, dir bool) (string, *os.File, error) {
	temporaries.Lock()
	defer temporaries.Unlock()
	if temporaries.closed {
		return "", nil, errShuttingDown
	}
	var path string
	var f *os.File
	var err error
	if dir {
		path, err = os.MkdirTemp(parent, prefix)
	} else if f, err = os.CreateTemp(parent, prefix); err == nil {
		path = f.Name()
	}
	if err != nil {
		return "", nil, err
	}
	if temporaries.paths == nil {
		temporaries.paths = map[string]bool{}
	}
	temporaries.paths[path] = true
	return path, f, nil
}

// renameTemp renames the registered temporary from to to and forgets it.
func renameTemp(from, to string) error {
	temporaries.Lock()
	defer temporaries.Unlock()
	if temporaries.closed {
		return errShuttingDown
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	delete(temporaries.paths, from)
	return nil
}

// registerTemp and forgetTemp track a path made by a rename (a checkpoint
// moved aside while its replacement goes in).
func registerTemp(path string) {
	temporaries.Lock()
	defer temporaries.Unlock()
	if temporaries.paths == nil {
		temporaries.paths = map[string]bool{}
	}
	temporaries.paths[path] = true
}

// removeTemp removes a registered temporary and forgets it.
func removeTemp(path string) {
	temporaries.Lock()
	defer temporaries.Unlock()
	os.RemoveAll(path)
	delete(temporaries.paths, path)
}

// RemoveTemporaries removes every temporary checkpoint file and directory
// this process has in flight, and makes later Saves fail without writing;
// then it gives back every checkpoint directory this process holds
// (Lock's unlock: the .lock file goes, and the directory too when Lock
// made it and it is still empty). A signal handler calls it just before
// the process exits at once (the second Ctrl-C, SIGQUIT): the checkpoint
// being written is lost, the previous one and latest stay as they were.
// It is safe to call from any goroutine, more than once, while a Save
// runs. A checkpoint moved aside for its replacement (resaving a step) is
// moved back.
func RemoveTemporaries() {
	temporaries.Lock()
	defer temporaries.Unlock()
	defer func() {
		for k, unlock := range temporaries.locks {
			unlock()
			delete(temporaries.locks, k)
		}
	}()
	temporaries.closed = true
	for p := range temporaries.paths {
		if old, ok := strings.CutSuffix(p, asideSuffix); ok {
			if final, ok := asideFinal(old); ok {
				if _, err := os.Stat(final); errors.Is(err, os.ErrNotExist) && os.Rename(p, final) == nil {
					delete(temporaries.paths, p)
					continue
				}
			}
		}
		removeAllNow(p)
		delete(temporaries.paths, p)
	}
}

// removeAllNow removes path while a Save may still be writing into it.
// os.RemoveAll alone can lose that race: a file created after it listed
// the directory makes the final rmdir fail. Renamed first, the directory
// takes no new file by its old path (Save's writes fail instead), and a
// few more passes catch a create already under way.
func removeAllNow(path string) {
	dead := path + "-removing"
	if os.Rename(path, dead) == nil {
		path = dead
	}
	for i := 0; i < 50; i++ {
		if os.RemoveAll(path) == nil {
			if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
				return
			}
		}
	}
}

const asideSuffix = "-old"

// asideFinal maps a temporary directory's path (.step-N-tmp-PID-R) to its
// checkpoint's (step-N).
func asideFinal(tmp string) (string, bool) {
	base := filepath.Base(tmp)
	rest, ok := strings.CutPrefix(base, ".step-")
	if !ok {
		return "", false
	}
	step, _, ok := strings.Cut(rest, "-tmp-")
	if !ok {
		return "", false
	}
	return filepath.Join(filepath.Dir(tmp), "step-"+step), true
}
