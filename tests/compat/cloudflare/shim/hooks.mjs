// Resolve hooks that let @cloudflare/sandbox load under plain Node. They change no code of the
// package; they only supply modules that exist inside the Workers runtime:
// - `cloudflare:workers` resolves to the stand-in beside this file;
// - the extensionless relative imports of @cloudflare/containers' dist resolve to `.js`, as a
//   bundler would resolve them.
export async function resolve(specifier, context, next) {
  if (specifier === "cloudflare:workers") {
    return { url: new URL("./cloudflare-workers.mjs", import.meta.url).href, shortCircuit: true };
  }
  try {
    return await next(specifier, context);
  } catch (err) {
    const relative = specifier.startsWith("./") || specifier.startsWith("../");
    if (err?.code !== "ERR_MODULE_NOT_FOUND" || !relative) throw err;
    for (const suffix of [".js", "/index.js"]) {
      try {
        return await next(specifier + suffix, context);
      } catch {
        // the next form, else the original error
      }
    }
    throw err;
  }
}
