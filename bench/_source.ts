/**
 * Which library code a run measured: a checkout's commit, the files of its
 * `src/` that differ from it, and a digest of `src/` as it was read.
 *
 * @module
 */

/** The library code of one checkout. */
export interface Source {
  /** The checkout's directory. */
  readonly root: string;
  /** The version in its deno.json ("" when there is none). */
  readonly version: string;
  /** The commit it is at ("" outside git). */
  readonly commit: string;
  /** `git status --porcelain` lines of its src/. */
  readonly changed: string[];
  /** SHA-256 of the files of src/, in name order. */
  readonly srcSha256: string;
}

/** Describes the checkout at `root` (a directory URL, ending with "/"). */
export async function describeSource(root: URL): Promise<Source> {
  const git = async (...gitArgs: string[]) => {
    try {
      const out = await new Deno.Command("git", {
        args: ["-C", root.pathname, ...gitArgs],
        stderr: "null",
      }).output();
      return new TextDecoder().decode(out.stdout).trim();
    } catch {
      return "";
    }
  };
  const dir = new URL("src/", root);
  const names = await filesUnder(dir);
  const bytes = await Promise.all(names.sort().map((n) => Deno.readFile(new URL(n, dir))));
  const digest = await crypto.subtle.digest("SHA-256", await new Blob(bytes).arrayBuffer());
  const config = await Deno.readTextFile(new URL("deno.json", root)).catch(() => "{}");
  return {
    root: root.pathname,
    version: String(JSON.parse(config).version ?? ""),
    commit: await git("rev-parse", "HEAD"),
    changed: (await git("status", "--porcelain", "--", "src")).split("\n").map((l) => l.trim())
      .filter(Boolean),
    srcSha256: [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join(""),
  };
}

/** One line: `5c9962a + 2 changed file(s) in src/, src/ sha256 0123456789ab`. */
export function sourceLine(source: Source): string {
  return `${source.commit.slice(0, 7) || "?"}${
    source.changed.length ? ` + ${source.changed.length} changed file(s) in src/` : ""
  }, src/ sha256 ${source.srcSha256.slice(0, 12)}`;
}

/** Paths of the files below `dir`, relative to it, with `/` between folders. */
async function filesUnder(dir: URL, prefix = ""): Promise<string[]> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(new URL(prefix, dir))) {
    if (entry.isFile) names.push(prefix + entry.name);
    else if (entry.isDirectory) names.push(...await filesUnder(dir, `${prefix}${entry.name}/`));
  }
  return names;
}
