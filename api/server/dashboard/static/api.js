// The dashboard's view of the REST API. Contract: get(path) sends the token as a bearer header and the
// ETag of its last answer for that path as If-None-Match, so an unchanged state costs a 304 with no body;
// it resolves to {changed, data, total, next} (data: the last answer, parsed; a paged listing's total, from
// X-Total-Count, and the cursor of its next page, from X-Next-Cursor, else null). A 401 rejects with Unauthorized (the
// caller asks for a token again); any other failure rejects with ApiError carrying the server's detail.

const CACHED = 64;

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export class Api {
  constructor(base = "/api/v1") {
    this.base = base;
    this.token = null;
    this.cache = new Map(); // path -> {etag, data, total, next}; the last CACHED paths (pages come and go)
  }

  setToken(token) {
    this.token = token;
    this.cache.clear();
  }

  async get(path, { text = false } = {}) {
    const cached = this.cache.get(path);
    const headers = { Authorization: `Bearer ${this.token}` };
    if (cached) headers["If-None-Match"] = cached.etag;
    let response;
    try {
      // no-store: the browser's own cache stays out of the way; we revalidate with our own ETag.
      response = await fetch(this.base + path, { headers, cache: "no-store" });
    } catch (error) {
      throw new ApiError(`cannot reach Tide (${error.message})`, 0);
    }
    if (response.status === 304 && cached) return { ...cached, changed: false };
    if (response.status === 401) throw new Unauthorized(await detail(response));
    if (!response.ok) throw new ApiError(await detail(response), response.status);
    const data = text ? await response.text() : await response.json();
    const etag = response.headers.get("ETag");
    const total = response.headers.get("X-Total-Count");
    const answer = { data, total: total === null ? null : Number(total), next: response.headers.get("X-Next-Cursor") };
    if (etag) {
      this.cache.delete(path);
      this.cache.set(path, { ...answer, etag });
      if (this.cache.size > CACHED) this.cache.delete(this.cache.keys().next().value);
    }
    return { ...answer, changed: true };
  }
}

async function detail(response) {
  try {
    const body = await response.json();
    return typeof body.detail === "string" ? body.detail : `HTTP ${response.status}`;
  } catch {
    return `HTTP ${response.status}`;
  }
}
