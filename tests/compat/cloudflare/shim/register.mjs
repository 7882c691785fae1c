// `node --import ./shim/register.mjs`: installs the resolve hooks of hooks.mjs.
import { register } from "node:module";

register("./hooks.mjs", import.meta.url);
