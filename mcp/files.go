package mcp

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/sdk"
)

// maxEntries bounds the entries list_files returns.
const maxEntries = 1000

// Encodings of file contents.
const (
	encodingText   = "utf-8"
	encodingBase64 = "base64"
	encodingImage  = "image"
)

type readFileIn struct {
	Sandbox string `json:"sandbox" jsonschema:"Id of the sandbox"`
	Path    string `json:"path" jsonschema:"File to read; relative paths start at the user's home"`
	Offset  int64  `json:"offset,omitempty" jsonschema:"Byte offset to start at (next_offset of a previous call); default 0"`
	User    string `json:"user,omitempty" jsonschema:"User to read as: user (the default) or root"`
}

type readFileOut struct {
	Path       string `json:"path" jsonschema:"The file read"`
	Size       int64  `json:"size" jsonschema:"The file's size in bytes"`
	Encoding   string `json:"encoding" jsonschema:"utf-8 for text; base64 for other bytes; image when the file is an image, sent as image content"`
	MIMEType   string `json:"mime_type,omitempty" jsonschema:"The image's type, such as image/png"`
	Content    string `json:"content" jsonschema:"The bytes read, as text or base64; empty for an image"`
	Offset     int64  `json:"offset" jsonschema:"Byte offset of the first byte read"`
	NextOffset int64  `json:"next_offset" jsonschema:"Byte offset after the last byte read: pass it as offset to read on"`
	Truncated  bool   `json:"truncated" jsonschema:"Whether bytes after next_offset were left out"`
}

type writeFileIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"Id of the sandbox"`
	Path     string `json:"path" jsonschema:"File to write; missing parent directories are made; an existing file is replaced"`
	Content  string `json:"content" jsonschema:"What to write: text, or base64 when encoding is base64"`
	Encoding string `json:"encoding,omitempty" jsonschema:"How content is encoded: utf-8 (the default) or base64"`
	User     string `json:"user,omitempty" jsonschema:"User to write as, who owns the file: user (the default) or root"`
}

type writeFileOut struct {
	Path         string `json:"path" jsonschema:"Absolute path of the file written"`
	BytesWritten int    `json:"bytes_written" jsonschema:"Bytes written"`
}

type listFilesIn struct {
	Sandbox string `json:"sandbox" jsonschema:"Id of the sandbox"`
	Path    string `json:"path,omitempty" jsonschema:"Directory to list; default the user's home"`
	Depth   int    `json:"depth,omitempty" jsonschema:"Levels to descend; default 1, the directory's own entries"`
	User    string `json:"user,omitempty" jsonschema:"User to list as: user (the default) or root"`
}

type fileEntry struct {
	Name          string `json:"name" jsonschema:"The entry's name"`
	Path          string `json:"path" jsonschema:"The entry's absolute path"`
	Type          string `json:"type" jsonschema:"file, dir or symlink"`
	Size          int64  `json:"size" jsonschema:"Size in bytes"`
	Permissions   string `json:"permissions" jsonschema:"Permission string, such as -rw-r--r--"`
	Owner         string `json:"owner,omitempty" jsonschema:"Owning user"`
	Modified      string `json:"modified,omitempty" jsonschema:"Last modification time (RFC 3339)"`
	SymlinkTarget string `json:"symlink_target,omitempty" jsonschema:"Where a symbolic link points"`
}

type listFilesOut struct {
	Path      string      `json:"path" jsonschema:"The directory listed"`
	Entries   []fileEntry `json:"entries" jsonschema:"The directory's entries"`
	Truncated bool        `json:"truncated,omitempty" jsonschema:"Set when there were more entries than listed"`
}

type pathIn struct {
	Sandbox string `json:"sandbox" jsonschema:"Id of the sandbox"`
	Path    string `json:"path" jsonschema:"Path in the sandbox; relative paths start at the user's home"`
	User    string `json:"user,omitempty" jsonschema:"User to act as: user (the default) or root"`
}

type makeDirOut struct {
	Path    string `json:"path" jsonschema:"The directory"`
	Created bool   `json:"created" jsonschema:"False when the directory existed already"`
}

type removePathOut struct {
	Path    string `json:"path" jsonschema:"The path removed"`
	Removed bool   `json:"removed" jsonschema:"Always true: failures are errors"`
}

func (t *tools) registerFiles(s *mcpsdk.Server) {
	addTool(s, t, &mcpsdk.Tool{
		Name:  "read_file",
		Title: "Read a file",
		Description: "Read a file from a sandbox: text as is, other bytes as base64, PNG/JPEG/GIF/WebP images as image content. " +
			"Long files are cut; read on with offset.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: no},
	}, nil, t.readFile)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "write_file",
		Title:       "Write a file",
		Description: "Write a file in a sandbox, from text or base64, making missing parent directories and replacing what was there.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: yes, IdempotentHint: true, OpenWorldHint: no},
	}, map[string][]any{"encoding": {encodingText, encodingBase64}}, t.writeFile)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "list_files",
		Title:       "List a directory",
		Description: "List the entries of a directory in a sandbox, optionally several levels deep.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: no},
	}, nil, t.listFiles)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "make_dir",
		Title:       "Make a directory",
		Description: "Make a directory in a sandbox, with its missing parents.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: no, IdempotentHint: true, OpenWorldHint: no},
	}, nil, t.makeDir)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "remove_path",
		Title:       "Remove a file or directory",
		Description: "Remove a file, or a directory with everything in it, from a sandbox.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: yes, IdempotentHint: true, OpenWorldHint: no},
	}, nil, t.removePath)
}

func checkPath(p string) error {
	if strings.TrimSpace(p) == "" {
		return errArgument("path is empty")
	}
	return nil
}

// fileError words a failed file operation on path.
func fileError(ctx context.Context, op, sandbox, path string, err error) error {
	if sdk.IsNotFound(err) {
		return fmt.Errorf("%q not found in sandbox %q: call list_files to see what exists", path, sandbox)
	}
	if sdk.IsDiskFull(err) && ctx.Err() == nil {
		return fmt.Errorf("sandbox disk is full: %s in sandbox %q failed (%w); %q keeps its old content: "+
			"remove files you no longer need (remove_path) and retry, or create a sandbox with a larger disk_mb", op, sandbox, err, path)
	}
	return explain(ctx, op, sandbox, err)
}

func (t *tools) readFile(ctx context.Context, in readFileIn) (*mcpsdk.CallToolResult, readFileOut, error) {
	var out readFileOut
	if err := checkPath(in.Path); err != nil {
		return nil, out, err
	}
	if in.Offset < 0 {
		return nil, out, errArgument("offset must not be negative")
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	opts := fileOptions(in.User)
	st, err := sb.Files.Stat(ctx, in.Path, opts...)
	if err != nil {
		return nil, out, fileError(ctx, "read "+in.Path, sb.ID(), in.Path, err)
	}
	if st.Type == sdk.FileTypeDir {
		return nil, out, fmt.Errorf("%q is a directory: call list_files to see its entries", in.Path)
	}
	rc, err := sb.Files.ReadStream(ctx, in.Path, opts...)
	if err != nil {
		return nil, out, fileError(ctx, "read "+in.Path, sb.ID(), in.Path, err)
	}
	defer rc.Close()
	if in.Offset > 0 {
		if _, err := io.CopyN(io.Discard, rc, in.Offset); err != nil && !errors.Is(err, io.EOF) {
			return nil, out, explain(ctx, "read "+in.Path, sb.ID(), err)
		}
	}
	br := bufio.NewReader(rc)
	head, _ := br.Peek(12)
	out = readFileOut{Path: st.Path, Size: st.Size, Offset: min(in.Offset, st.Size)}
	if out.Path == "" {
		out.Path = in.Path
	}

	if mime := imageType(head); mime != "" && in.Offset == 0 {
		if st.Size > int64(t.cfg.ImageLimit) {
			return nil, out, fmt.Errorf("%q is a %s image of %d bytes, above the %d-byte limit for images: shrink it first (run_command), or read it as bytes with an offset",
				in.Path, mime, st.Size, t.cfg.ImageLimit)
		}
		data, err := io.ReadAll(io.LimitReader(br, int64(t.cfg.ImageLimit)+1))
		if err != nil {
			return nil, out, explain(ctx, "read "+in.Path, sb.ID(), err)
		}
		out.Encoding, out.MIMEType, out.NextOffset = encodingImage, mime, int64(len(data))
		res := &mcpsdk.CallToolResult{Content: []mcpsdk.Content{
			&mcpsdk.ImageContent{Data: data, MIMEType: mime},
			&mcpsdk.TextContent{Text: fmt.Sprintf("%s: %s image, %d bytes", out.Path, mime, len(data))},
		}}
		return res, out, nil
	}

	data, err := io.ReadAll(io.LimitReader(br, int64(t.cfg.OutputLimit)))
	if err != nil {
		return nil, out, explain(ctx, "read "+in.Path, sb.ID(), err)
	}
	var text string
	if isText(data) {
		s := string(data)
		if out.Offset+int64(len(data)) < st.Size {
			// Cut on a rune boundary; the next read starts at the cut.
			s = trimPartialRune(s)
		}
		out.Encoding, out.Content = encodingText, s
		out.NextOffset = out.Offset + int64(len(s))
		text = s
	} else {
		// Base64 grows by a third: read no more than fits the limit.
		raw := data[:min(len(data), t.cfg.OutputLimit/4*3)]
		out.Encoding, out.Content = encodingBase64, base64.StdEncoding.EncodeToString(raw)
		out.NextOffset = out.Offset + int64(len(raw))
		text = fmt.Sprintf("%s holds binary data; bytes %d to %d as base64:\n%s", out.Path, out.Offset, out.NextOffset, out.Content)
	}
	out.Truncated = out.NextOffset < st.Size
	if out.Truncated {
		text += "\n" + truncationMarker(out.NextOffset-out.Offset, st.Size-out.Offset,
			fmt.Sprintf("call read_file again with offset=%d for more", out.NextOffset))
	}
	return textResult(text), out, nil
}

// trimPartialRune drops an incomplete rune at the end of s.
func trimPartialRune(s string) string {
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				return s[:i]
			}
			return s
		}
	}
	return s
}

func fileOptions(user string) []sdk.FileOption {
	if user == "" {
		return nil
	}
	return []sdk.FileOption{sdk.WithUser(user)}
}

func (t *tools) writeFile(ctx context.Context, in writeFileIn) (*mcpsdk.CallToolResult, writeFileOut, error) {
	var out writeFileOut
	if err := checkPath(in.Path); err != nil {
		return nil, out, err
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", encodingText:
	case encodingBase64:
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(in.Content))
		if err != nil {
			return nil, out, errArgument("content is not valid base64: %v", err)
		}
		data = b
	default:
		return nil, out, errArgument("encoding %q: use utf-8 or base64", in.Encoding)
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	wi, err := sb.Files.Write(ctx, in.Path, data, fileOptions(in.User)...)
	if err != nil {
		return nil, out, fileError(ctx, "write "+in.Path, sb.ID(), in.Path, err)
	}
	out = writeFileOut{Path: wi.Path, BytesWritten: len(data)}
	if out.Path == "" {
		out.Path = in.Path
	}
	return textResult(fmt.Sprintf("wrote %d bytes to %s", len(data), out.Path)), out, nil
}

func (t *tools) listFiles(ctx context.Context, in listFilesIn) (*mcpsdk.CallToolResult, listFilesOut, error) {
	out := listFilesOut{Entries: []fileEntry{}}
	if in.Depth < 0 {
		return nil, out, errArgument("depth must not be negative")
	}
	path := in.Path
	if strings.TrimSpace(path) == "" {
		path = "~"
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	entries, err := sb.Files.List(ctx, path, in.Depth, fileOptions(in.User)...)
	if err != nil {
		if sdk.IsInvalidArgument(err) {
			return nil, out, fmt.Errorf("list %q in sandbox %q: %w: read a file with read_file", path, sb.ID(), err)
		}
		return nil, out, fileError(ctx, "list "+path, sb.ID(), path, err)
	}
	out.Path = path
	var b strings.Builder
	for _, e := range entries {
		if len(out.Entries) == maxEntries {
			out.Truncated = true
			break
		}
		fe := fileEntry{
			Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Permissions: e.Permissions,
			Owner: e.Owner, Modified: formatTime(e.ModifiedTime), SymlinkTarget: e.SymlinkTarget,
		}
		if fe.Type == "" {
			fe.Type = "unknown"
		}
		out.Entries = append(out.Entries, fe)
		fmt.Fprintf(&b, "%s %8d %s %s", fe.Permissions, fe.Size, fe.Modified, fe.Path)
		if fe.Type == string(sdk.FileTypeDir) {
			b.WriteString("/")
		}
		if fe.SymlinkTarget != "" {
			b.WriteString(" -> " + fe.SymlinkTarget)
		}
		b.WriteString("\n")
	}
	if len(out.Entries) == 0 {
		b.WriteString(path + " is empty\n")
	}
	if out.Truncated {
		fmt.Fprintf(&b, "[truncated: showing the first %d entries; list a subdirectory or use a smaller depth]\n", maxEntries)
	}
	return textResult(strings.TrimSuffix(b.String(), "\n")), out, nil
}

func (t *tools) makeDir(ctx context.Context, in pathIn) (*mcpsdk.CallToolResult, makeDirOut, error) {
	var out makeDirOut
	if err := checkPath(in.Path); err != nil {
		return nil, out, err
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	created, err := sb.Files.MakeDir(ctx, in.Path, fileOptions(in.User)...)
	if err != nil {
		return nil, out, fileError(ctx, "make directory "+in.Path, sb.ID(), in.Path, err)
	}
	out = makeDirOut{Path: in.Path, Created: created}
	if !created {
		return textResult(in.Path + " exists already"), out, nil
	}
	return textResult("made directory " + in.Path), out, nil
}

func (t *tools) removePath(ctx context.Context, in pathIn) (*mcpsdk.CallToolResult, removePathOut, error) {
	var out removePathOut
	if err := checkPath(in.Path); err != nil {
		return nil, out, err
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	if err := sb.Files.Remove(ctx, in.Path, fileOptions(in.User)...); err != nil {
		return nil, out, fileError(ctx, "remove "+in.Path, sb.ID(), in.Path, err)
	}
	out = removePathOut{Path: in.Path, Removed: true}
	return textResult("removed " + in.Path), out, nil
}
