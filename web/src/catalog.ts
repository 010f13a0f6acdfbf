// What sandboxes start from: the templates built through the template API
// (GET /templates) and the daemon's images (GET /images, Tupper's own
// route), both as the caller's team may see them.

import { api } from './api'

export interface TemplateJSON {
  templateID: string
  aliases?: string[]
  names?: string[]
  cpuCount: number
  memoryMB: number
  buildStatus: string
  buildCount: number
  createdAt: string
  updatedAt: string
}

export interface ImageJSON {
  id: string
  names: string[]
  size: number
  created: string
  shared: boolean
}

export async function listTemplates(): Promise<TemplateJSON[]> {
  return (await api<TemplateJSON[] | undefined>('GET', '/templates')) ?? []
}

export async function listImages(): Promise<ImageJSON[]> {
  return (await api<{ images: ImageJSON[] } | undefined>('GET', '/images'))?.images ?? []
}

// templateNames returns every name a create may give, for suggestions.
// A source that fails (template builds turned off) gives none.
export async function templateNames(): Promise<string[]> {
  const [templates, images] = await Promise.allSettled([listTemplates(), listImages()])
  const names = new Set<string>()
  if (templates.status === 'fulfilled') {
    for (const t of templates.value) for (const n of t.names ?? t.aliases ?? []) names.add(n)
  }
  if (images.status === 'fulfilled') {
    for (const img of images.value) for (const n of img.names) if (!n.startsWith('tupper-build-cache/')) names.add(n)
  }
  return [...names].sort()
}
